// Shape family: reshape, transpose, expand/squeeze, broadcast, slicing, concat/split/stack,
// pad, tile, reverse, flatten, shape_of, and the ops their gradients are made of.
//
// Inference accepts unknown dims (-1) and gives -1 where a dim is not yet known;
// specialisation re-runs it with concrete shapes, which is where checks on unknown dims
// happen. Decisions that depend on static knowledge (squeeze's default axes, normalised
// axes) are written back into the node's attributes so they stay the same later.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/ops/common.h"
#include "core/ops/shape_attrs.h"
#include "core/ops/shape_ops.h"

namespace mg::ops {

namespace {

using Types = std::vector<TensorType>;
using Ints = std::vector<int64_t>;

std::string ints_str(const Ints& v) {  // "(4, -1)": dims as given, -1 kept
  std::string r = "(";
  for (size_t i = 0; i < v.size(); ++i) r += (i ? ", " : "") + std::to_string(v[i]);
  if (v.size() == 1) r += ",";
  return r + ")";
}

int64_t rank_of(const InferCtx& c, size_t i = 0) { return int64_t(c.in[i].shape.size()); }

// a * b for dims, -1 when either is unknown (unless the other is 0); errors on overflow.
int64_t mul_dims(const InferCtx& c, int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  if (a < 0 || b < 0) return -1;
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) c.fail(ErrorKind::Value, "result has too many elements");
  return r;
}
int64_t add_dims(const InferCtx& c, int64_t a, int64_t b) {
  if (a < 0 || b < 0) return -1;
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) c.fail(ErrorKind::Value, "result has too many elements");
  return r;
}
int64_t product(const InferCtx& c, const Shape& s, size_t from, size_t to) {
  int64_t p = 1;
  bool unknown = false;
  for (size_t i = from; i < to; ++i) {
    if (s[i] == 0) return 0;
    if (s[i] < 0) unknown = true;
    else p = mul_dims(c, p, s[i]);
  }
  return unknown ? -1 : p;
}

// Same dtype and rank; dims merged (unknown takes the known one), except `skip`.
Shape merge_shapes(const InferCtx& c, int64_t skip, const char* what) {
  Shape s = c.in[0].shape;
  for (size_t k = 1; k < c.in.size(); ++k) {
    c.same_dtype(0, k);
    const Shape& o = c.in[k].shape;
    if (o.size() != s.size())
      c.fail(ErrorKind::Value, std::string(what) + " needs inputs of one rank, got " + type_str(c.in[0]) + " and " +
                                   type_str(c.in[k]));
    for (size_t d = 0; d < s.size(); ++d) {
      if (int64_t(d) == skip) continue;
      if (s[d] >= 0 && o[d] >= 0 && s[d] != o[d])
        c.fail(ErrorKind::Value, std::string(what) + " needs inputs whose dims match" +
                                     (skip >= 0 ? " except on axis " + std::to_string(skip) : std::string()) +
                                     ", got " + type_str(c.in[0]) + " and " + type_str(c.in[k]));
      if (s[d] < 0) s[d] = o[d];
    }
  }
  return s;
}

// ---- strided slice ----

StridedSliceAttrs slice_attrs(const InferCtx& c) {
  return {c.ints("starts"), c.ints("ends"), c.ints("strides"), c.i("start_mask"), c.i("end_mask"),
          c.i("squeeze_mask")};
}

bool bit(int64_t mask, size_t i) { return (uint64_t(mask) >> i) & 1u; }

// The output shape of a strided slice of `in` (squeezed dims removed); checks everything
// that can be checked with what is known.
Shape strided_slice_shape(const InferCtx& c, const Shape& in, const StridedSliceAttrs& a) {
  const size_t r = in.size();
  if (a.starts.size() != r || a.ends.size() != r || a.strides.size() != r)
    c.fail(ErrorKind::Value, "starts, ends and strides need one entry per dim of the rank-" + std::to_string(r) +
                                 " input, got " + std::to_string(a.starts.size()) + ", " +
                                 std::to_string(a.ends.size()) + " and " + std::to_string(a.strides.size()));
  if (r > 64) c.fail(ErrorKind::Value, "supports inputs of rank at most 64");
  const std::pair<int64_t, const char*> masks[] = {
      {a.start_mask, "start_mask"}, {a.end_mask, "end_mask"}, {a.squeeze_mask, "squeeze_mask"}};
  for (auto [mask, name] : masks)
    if (r < 64 && (uint64_t(mask) >> r) != 0)
      c.fail(ErrorKind::Value, std::string(name) + " " + std::to_string(mask) + " has bits set beyond rank " +
                                   std::to_string(r));
  Shape out;
  for (size_t i = 0; i < r; ++i) {
    const int64_t n = in[i];
    if (bit(a.squeeze_mask, i)) {
      if (n >= 0) {
        int64_t idx = a.starts[i] < 0 ? a.starts[i] + n : a.starts[i];
        if (idx < 0 || idx >= n)
          c.fail(ErrorKind::Index, "index " + std::to_string(a.starts[i]) + " is out of range for dim " +
                                       std::to_string(i) + " of size " + std::to_string(n));
      }
      continue;
    }
    if (a.strides[i] == 0) c.fail(ErrorKind::Value, "stride of dim " + std::to_string(i) + " is 0");
    if (n < 0) {
      out.push_back(-1);
      continue;
    }
    out.push_back(resolve_slice_dim(n, a.starts[i], a.ends[i], a.strides[i], bit(a.start_mask, i),
                                    bit(a.end_mask, i)).count);
  }
  return out;
}

Attrs slice_attr_map(const StridedSliceAttrs& a) {
  return {{"starts", a.starts}, {"ends", a.ends}, {"strides", a.strides},
          {"start_mask", a.start_mask}, {"end_mask", a.end_mask}, {"squeeze_mask", a.squeeze_mask}};
}
StridedSliceAttrs decode_strided_slice(const Attrs& a) {
  return {get_attr<Ints>(a, "starts"), get_attr<Ints>(a, "ends"), get_attr<Ints>(a, "strides"),
          get_attr<int64_t>(a, "start_mask"), get_attr<int64_t>(a, "end_mask"), get_attr<int64_t>(a, "squeeze_mask")};
}
std::vector<AttrSpec> slice_attr_specs() {
  return {attr("starts", AttrKind::Ints, AttrNone{}, "start per dim (negative counts from the end)"),
          attr("ends", AttrKind::Ints, AttrNone{}, "end per dim, exclusive (negative counts from the end)"),
          attr("strides", AttrKind::Ints, AttrNone{}, "step per dim, nonzero; negative walks backwards"),
          attr("start_mask", AttrKind::Int, int64_t(0), "bit i: ignore starts[i], begin at the start (end for a negative stride)"),
          attr("end_mask", AttrKind::Int, int64_t(0), "bit i: ignore ends[i], run to the end (before the start for a negative stride)"),
          attr("squeeze_mask", AttrKind::Int, int64_t(0), "bit i: take the single element at starts[i] and drop dim i")};
}

// A strided slice taking [start, start + length) of one dim and all of the others.
StridedSliceAttrs one_dim_slice(size_t rank, size_t dim, int64_t start, int64_t end, bool end_mask) {
  StridedSliceAttrs a{Ints(rank, 0), Ints(rank, 0), Ints(rank, 1), 0, 0, 0};
  int64_t all = rank >= 64 ? -1 : int64_t((uint64_t(1) << rank) - 1);
  a.start_mask = all & ~int64_t(uint64_t(1) << dim);
  a.end_mask = end_mask ? all : a.start_mask;
  a.starts[dim] = start;
  a.ends[dim] = end;
  return a;
}

ValueRef reshape_like(Graph& g, ValueRef x, ValueRef like) {
  const Shape& xs = g.type(x).shape;
  const Shape& ls = g.type(like).shape;
  if (xs == ls && shape_known(xs)) return x;
  if (shape_known(ls)) return call(g, "reshape", {x}, {{"shape", ls}});
  return call(g, "reshape_like", {x, like});
}

Types one(DType d, Shape s) { return Types{{d, std::move(s)}}; }

// ---- pad ----

PadMode read_pad_mode(InferCtx& c) {
  const std::string mode = c.s("mode");
  PadMode m;
  if (!parse_pad_mode(mode, m)) {
    if (mode == "antiperiodic" || mode == "zero")
      c.fail(ErrorKind::NotImplemented, "mode '" + mode + "' is not implemented");
    c.fail(ErrorKind::Value, "unknown mode '" + mode + "'; expected 'constant', 'reflect', 'symmetric', 'edge' "
                                                       "(or 'clamp_to_edge') or 'wrap' (or 'periodic', 'circular')");
  }
  c.attrs["mode"] = std::string(pad_mode_name(m));  // aliases stored as the canonical name
  return m;
}

// x padded by the node's left/right padding in mode m; checks the mode's limits on every
// known dim (unknown dims are checked again at specialisation).
Shape padded_shape(const InferCtx& c, const TensorType& x, PadMode m) {
  const Ints& l = c.ints("left_padding");
  const Ints& rp = c.ints("right_padding");
  const int64_t r = int64_t(x.shape.size());
  if (int64_t(l.size()) != r || int64_t(rp.size()) != r)
    c.fail(ErrorKind::Value, "left_padding " + ints_str(l) + " and right_padding " + ints_str(rp) +
                                 " need one entry per dim of " + type_str(x));
  Shape out = x.shape;
  for (size_t i = 0; i < out.size(); ++i) {
    if (l[i] < 0 || rp[i] < 0)
      c.fail(ErrorKind::Value, "negative padding for dim " + std::to_string(i) + ": left_padding " + ints_str(l) +
                                   ", right_padding " + ints_str(rp));
    const int64_t n = out[i];
    const int64_t lim = n >= 0 ? max_pad(m, n) : -1;
    if (lim >= 0 && (l[i] > lim || rp[i] > lim)) {
      std::string rule = m == PadMode::Reflect ? "padding smaller than the dim"
                         : m == PadMode::Edge  ? "a non-empty dim to pad"
                                               : "padding no larger than the dim";
      c.fail(ErrorKind::Value, "mode '" + std::string(pad_mode_name(m)) + "' needs " + rule + ", but dim " +
                                   std::to_string(i) + " of " + type_str(x) + " has size " + std::to_string(n) +
                                   " (left_padding " + ints_str(l) + ", right_padding " + ints_str(rp) + ")");
    }
    out[i] = add_dims(c, add_dims(c, out[i], l[i]), rp[i]);
  }
  return out;
}

// ---- space_to_depth_2d / depth_to_space_2d ----

// Checks the attributes and rank; returns whether the layout is NCHW.
bool read_space_depth(InferCtx& c, int64_t& b) {
  const std::string& layout = c.s("data_layout");
  if (layout != "NHWC" && layout != "NCHW")
    c.fail(ErrorKind::Value, "data_layout must be 'NHWC' or 'NCHW', got '" + layout + "'");
  b = c.i("block_size");
  if (b < 1) c.fail(ErrorKind::Value, "block_size must be positive, got " + std::to_string(b));
  if (c.in[0].shape.size() != 4)
    c.fail(ErrorKind::Value, "needs a rank-4 " + layout + " tensor, got " + type_str(c.in[0]));
  return layout == "NCHW";
}

SpaceDepthAttrs decode_space_depth(const Attrs& a) {
  return {get_attr<int64_t>(a, "block_size"), get_attr<std::string>(a, "data_layout") == "NCHW",
          get_attr<bool>(a, "use_pixel_shuffle_order")};
}

Attrs space_depth_attrs(const Node& n) {
  const SpaceDepthAttrs& a = typed_attrs<SpaceDepthAttrs>(n);
  return {{"block_size", a.block_size},
          {"data_layout", std::string(a.nchw ? "NCHW" : "NHWC")},
          {"use_pixel_shuffle_order", a.use_pixel_shuffle_order}};
}

std::vector<AttrSpec> space_depth_attr_specs() {
  return {attr("block_size", AttrKind::Int, AttrNone{}, "side b of the square spatial blocks (>= 1)"),
          attr("data_layout", AttrKind::String, std::string("NHWC"), "'NHWC' or 'NCHW'"),
          attr("use_pixel_shuffle_order", AttrKind::Bool, true,
               "depth index c*b*b + i*b + j (PyTorch pixel_shuffle, ONNX CRD) when true, (i*b + j)*C + c "
               "(TensorFlow, ONNX DCR) when false; i, j = row, column inside the block")};
}

// ---- typed attributes (shape_attrs.h) ----

TransposeAttrs decode_transpose(const Attrs& a) { return {get_attr<Ints>(a, "permutation")}; }
SwapAxesAttrs decode_swap_axes(const Attrs& a) { return {get_attr<int64_t>(a, "axis1"), get_attr<int64_t>(a, "axis2")}; }
SliceAttrs decode_slice(const Attrs& a) {
  return {get_attr<int64_t>(a, "axis"), get_attr<int64_t>(a, "start"), get_attr<int64_t>(a, "length")};
}
AxisAttrs decode_axis(const Attrs& a) { return {get_attr<int64_t>(a, "axis")}; }
PadAttrs decode_pad_gradient(const Attrs& a) {
  PadAttrs r{get_attr<Ints>(a, "left_padding"), get_attr<Ints>(a, "right_padding"), PadMode::Constant, 0.0};
  if (!parse_pad_mode(get_attr<std::string>(a, "mode"), r.mode))  // inference stored the canonical name
    throw std::logic_error("internal error: unknown pad mode '" + get_attr<std::string>(a, "mode") + "'");
  return r;
}
PadAttrs decode_pad(const Attrs& a) {
  PadAttrs r = decode_pad_gradient(a);
  r.constant_value = get_attr<double>(a, "constant_value");
  return r;
}
BandPartAttrs decode_band_part(const Attrs& a) {
  return {get_attr<int64_t>(a, "num_lower"), get_attr<int64_t>(a, "num_upper")};
}
OneHotAttrs decode_one_hot(const Attrs& a) {
  return {get_attr<int64_t>(a, "depth"), get_attr<int64_t>(a, "axis"), get_attr<DType>(a, "dtype"),
          get_attr<double>(a, "on_value"), get_attr<double>(a, "off_value")};
}
TileAttrs decode_tile(const Attrs& a) { return {get_attr<Ints>(a, "multiples")}; }
ReverseAttrs decode_reverse(const Attrs& a) { return {get_attr<Ints>(a, "axes")}; }

// The batch axis stays first (an NHWC network's transposes around its layers).
bool per_sample_transpose(const Node& n, const std::vector<TensorType>& in, const std::vector<char>& batched) {
  const std::vector<int64_t>& perm = typed_attrs<TransposeAttrs>(n).permutation;
  return per_sample_first_input(n, in, batched) && !perm.empty() && perm[0] == 0;
}

void reg(OpDef d) {
  d.family = "shape";
  register_op(std::move(d));
}


// ---- reshape ----

std::vector<TensorType> infer_reshape(InferCtx& c) {
  const TensorType& x = c.in[0];
  Shape t = c.ints("shape");
  int infer_at = -1;
  int64_t known = 1;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == -1) {
      if (infer_at >= 0) c.fail(ErrorKind::Value, "shape " + ints_str(t) + " has more than one -1");
      infer_at = int(i);
    } else if (t[i] < 0) {
      c.fail(ErrorKind::Value, "shape " + ints_str(t) + " has a negative dim");
    } else {
      known = mul_dims(c, known, t[i]);
    }
  }
  int64_t n = product(c, x.shape, 0, x.shape.size());
  if (n < 0) return one(x.dtype, t);  // -1 stays unknown until specialisation
  if (infer_at >= 0) {
    if (known == 0 || n % known != 0)
      c.fail(ErrorKind::Value, "cannot reshape " + type_str(x) + " (" + std::to_string(n) + " elements) to " +
                                   ints_str(t));
    t[size_t(infer_at)] = n / known;
  } else if (known != n) {
    c.fail(ErrorKind::Value, "cannot reshape " + type_str(x) + " (" + std::to_string(n) + " elements) to " +
                                 ints_str(t) + " (" + std::to_string(known) + " elements)");
  }
  return one(x.dtype, t);
}

std::vector<ValueRef> grad_reshape(GradCtx& c) {
  return std::vector<ValueRef>{reshape_like(c.g, c.dy[0], c.x(0))};
}

// ---- reshape_like ----

std::vector<TensorType> infer_reshape_like(InferCtx& c) {
  int64_t n = product(c, c.in[0].shape, 0, c.in[0].shape.size());
  int64_t m = product(c, c.in[1].shape, 0, c.in[1].shape.size());
  if (n >= 0 && m >= 0 && n != m)
    c.fail(ErrorKind::Value, "cannot reshape " + type_str(c.in[0]) + " (" + std::to_string(n) +
                                 " elements) to the shape " + shape_str(c.in[1].shape) + " of 'like' (" +
                                 std::to_string(m) + " elements)");
  return one(c.in[0].dtype, c.in[1].shape);
}

std::vector<ValueRef> grad_reshape_like(GradCtx& c) {
  return std::vector<ValueRef>{reshape_like(c.g, c.dy[0], c.x(0)), ValueRef{}};
}

// ---- transpose ----

std::vector<TensorType> infer_transpose(InferCtx& c) {
  const int64_t r = rank_of(c);
  Ints p;
  if (c.has("permutation")) {
    const Ints& given = c.ints("permutation");
    if (int64_t(given.size()) != r)
      c.fail(ErrorKind::Value, "permutation " + ints_str(given) + " does not match the rank of " +
                                   type_str(c.in[0]));
    for (auto a : given) p.push_back(c.axis(a, r));
    Ints s = p;
    std::sort(s.begin(), s.end());
    for (int64_t i = 0; i < r; ++i)
      if (s[size_t(i)] != i) c.fail(ErrorKind::Value, "permutation " + ints_str(given) + " is not a permutation of the dims of " + type_str(c.in[0]));
  } else {
    for (int64_t i = r - 1; i >= 0; --i) p.push_back(i);
  }
  c.attrs["permutation"] = p;
  Shape out;
  for (auto a : p) out.push_back(c.in[0].shape[size_t(a)]);
  return one(c.in[0].dtype, out);
}

std::vector<ValueRef> grad_transpose(GradCtx& c) {
  const Ints& p = typed_attrs<TransposeAttrs>(c.node).permutation;
  Ints inv(p.size());
  for (size_t i = 0; i < p.size(); ++i) inv[size_t(p[i])] = int64_t(i);
  return std::vector<ValueRef>{call(c.g, "transpose", {c.dy[0]}, {{"permutation", inv}})};
}

// ---- swap_axes ----

std::vector<TensorType> infer_swap_axes(InferCtx& c) {
  const int64_t r = rank_of(c);
  int64_t a = c.axis(c.i("axis1"), r), b = c.axis(c.i("axis2"), r);
  c.attrs["axis1"] = a;
  c.attrs["axis2"] = b;
  Shape out = c.in[0].shape;
  std::swap(out[size_t(a)], out[size_t(b)]);
  return one(c.in[0].dtype, out);
}

std::vector<ValueRef> grad_swap_axes(GradCtx& c) {
  const SwapAxesAttrs& a = typed_attrs<SwapAxesAttrs>(c.node);
  return std::vector<ValueRef>{call(c.g, "swap_axes", {c.dy[0]}, {{"axis1", a.axis1}, {"axis2", a.axis2}})};
}

// ---- expand_dims ----

std::vector<TensorType> infer_expand_dims(InferCtx& c) {
  const Ints& given = c.ints("axes");
  const int64_t out_rank = rank_of(c) + int64_t(given.size());
  Ints ax;
  for (auto a : given) {
    auto n = normalize_axis(a, out_rank);
    if (!n) c.fail(ErrorKind::Index, "axis " + std::to_string(a) + " is out of range for the rank-" +
                                         std::to_string(out_rank) + " result of expanding " + type_str(c.in[0]));
    ax.push_back(*n);
  }
  std::sort(ax.begin(), ax.end());
  if (std::adjacent_find(ax.begin(), ax.end()) != ax.end()) c.fail(ErrorKind::Value, "repeated axis in axes " + ints_str(given));
  c.attrs["axes"] = ax;
  Shape out;
  size_t k = 0, j = 0;
  for (int64_t i = 0; i < out_rank; ++i) {
    if (k < ax.size() && ax[k] == i) {
      out.push_back(1);
      ++k;
    } else {
      out.push_back(c.in[0].shape[j++]);
    }
  }
  return one(c.in[0].dtype, out);
}

std::vector<ValueRef> grad_expand_dims(GradCtx& c) {
  return std::vector<ValueRef>{reshape_like(c.g, c.dy[0], c.x(0))};
}

// ---- squeeze ----

std::vector<TensorType> infer_squeeze(InferCtx& c) {
  const Shape& s = c.in[0].shape;
  Ints ax;
  if (c.has("axes")) {
    ax = c.axes(c.ints("axes"), rank_of(c));
    for (auto a : ax)
      if (s[size_t(a)] >= 0 && s[size_t(a)] != 1)
        c.fail(ErrorKind::Value, "cannot squeeze axis " + std::to_string(a) + " of size " +
                                     std::to_string(s[size_t(a)]) + " in " + type_str(c.in[0]));
  } else {
    for (size_t i = 0; i < s.size(); ++i)
      if (s[i] == 1) ax.push_back(int64_t(i));
  }
  c.attrs["axes"] = ax;
  Shape out;
  for (size_t i = 0, k = 0; i < s.size(); ++i) {
    if (k < ax.size() && ax[k] == int64_t(i)) ++k;
    else out.push_back(s[i]);
  }
  return one(c.in[0].dtype, out);
}

std::vector<ValueRef> grad_squeeze(GradCtx& c) {
  return std::vector<ValueRef>{reshape_like(c.g, c.dy[0], c.x(0))};
}

// ---- broadcast_to ----

std::vector<TensorType> infer_broadcast_to(InferCtx& c) {
  const Shape& xs = c.in[0].shape;
  const Shape& t = c.ints("shape");
  const int64_t R = int64_t(t.size()), r = int64_t(xs.size());
  auto bad = [&]() {
    c.fail(ErrorKind::Value, "cannot broadcast " + type_str(c.in[0]) + " to " + ints_str(t));
  };
  if (R < r) bad();
  Shape out(static_cast<size_t>(R));
  for (int64_t i = 0; i < R; ++i) {
    int64_t j = i - (R - r);
    int64_t td = t[size_t(i)];
    int64_t xd = j >= 0 ? xs[size_t(j)] : 1;
    if (td < -1) bad();
    if (td == -1) {
      if (j < 0) bad();
      out[size_t(i)] = xd;
    } else if (xd == td || xd == 1 || xd < 0) {
      out[size_t(i)] = td;  // an unknown dim is checked again at specialisation
    } else {
      bad();
    }
  }
  return one(c.in[0].dtype, out);
}

std::vector<ValueRef> grad_broadcast_to(GradCtx& c) {
  return std::vector<ValueRef>{sum_to_like(c.g, c.dy[0], c.x(0))};
}

// ---- slice ----

std::vector<TensorType> infer_slice(InferCtx& c) {
  const int64_t d = c.axis(c.i("axis"), rank_of(c));
  c.attrs["axis"] = d;
  const int64_t start = c.i("start"), length = c.i("length");
  if (length < 0) c.fail(ErrorKind::Value, "length " + std::to_string(length) + " is negative");
  Shape out = c.in[0].shape;
  const int64_t n = out[size_t(d)];
  if (n >= 0) {
    int64_t s = start < 0 ? start + n : start;
    if (s < 0 || s > n || length > n - s)
      c.fail(ErrorKind::Index, "start " + std::to_string(start) + " and length " + std::to_string(length) +
                                   " are out of range for dim " + std::to_string(d) + " of size " +
                                   std::to_string(n) + " of " + type_str(c.in[0]));
  }
  out[size_t(d)] = length;
  return one(c.in[0].dtype, out);
}

std::vector<ValueRef> grad_slice(GradCtx& c) {
  const size_t r = c.g.type(c.x(0)).shape.size();
  const SliceAttrs& s = typed_attrs<SliceAttrs>(c.node);
  const size_t d = size_t(s.axis);
  const int64_t start = s.start, length = s.length;
  StridedSliceAttrs a;
  if (start < 0 && start + length == 0) a = one_dim_slice(r, d, start, 0, true);
  else a = one_dim_slice(r, d, start, start + length, false);
  return std::vector<ValueRef>{call(c.g, "slice_gradient", {c.dy[0], c.x(0)}, slice_attr_map(a))};
}

// ---- strided_slice ----

std::vector<TensorType> infer_strided_slice(InferCtx& c) {
  return one(c.in[0].dtype, strided_slice_shape(c, c.in[0].shape, slice_attrs(c)));
}

std::vector<ValueRef> grad_strided_slice(GradCtx& c) {
  return std::vector<ValueRef>{
      call(c.g, "slice_gradient", {c.dy[0], c.x(0)}, slice_attr_map(typed_attrs<StridedSliceAttrs>(c.node)))};
}

// ---- slice_gradient ----

std::vector<TensorType> infer_slice_gradient(InferCtx& c) {
  Shape fwd = strided_slice_shape(c, c.in[1].shape, slice_attrs(c));
  const Shape& ds = c.in[0].shape;
  bool ok = ds.size() == fwd.size();
  for (size_t i = 0; ok && i < ds.size(); ++i) ok = ds[i] < 0 || fwd[i] < 0 || ds[i] == fwd[i];
  if (!ok)
    c.fail(ErrorKind::Value, "dy " + type_str(c.in[0]) + " does not match the slice's shape " + shape_str(fwd));
  return one(c.in[0].dtype, c.in[1].shape);
}

std::vector<ValueRef> grad_slice_gradient(GradCtx& c) {
  return std::vector<ValueRef>{call(c.g, "strided_slice", {c.dy[0]}, slice_attr_map(typed_attrs<StridedSliceAttrs>(c.node))),
                               ValueRef{}};
}

// ---- concat ----

std::vector<TensorType> infer_concat(InferCtx& c) {
  if (c.in.empty()) c.fail(ErrorKind::Value, "needs at least one tensor");
  const int64_t r = rank_of(c);
  if (r == 0) c.fail(ErrorKind::Value, "cannot concatenate rank-0 tensors; use stack");
  const int64_t ax = c.axis(c.i("axis"), r);
  c.attrs["axis"] = ax;
  Shape out = merge_shapes(c, ax, "concat");
  int64_t sum = 0;
  for (auto& t : c.in) sum = add_dims(c, sum, t.shape[size_t(ax)]);
  out[size_t(ax)] = sum;
  return one(c.in[0].dtype, out);
}

std::vector<ValueRef> grad_concat(GradCtx& c) {
  std::vector<ValueRef> in{c.dy[0]};
  for (auto& v : c.node.inputs) in.push_back(v);
  return c.g.add("split_like", in, {{"axis", typed_attrs<AxisAttrs>(c.node).axis}});
}

// ---- split_like ----

std::vector<TensorType> infer_split_like(InferCtx& c) {
  const int64_t r = rank_of(c);
  if (c.in.size() < 2) c.fail(ErrorKind::Value, "needs at least one tensor in 'likes'");
  const int64_t ax = c.axis(c.i("axis"), r);
  c.attrs["axis"] = ax;
  const Shape& xs = c.in[0].shape;
  Types out;
  int64_t sum = 0;
  for (size_t k = 1; k < c.in.size(); ++k) {
    if (int64_t(c.in[k].shape.size()) != r)
      c.fail(ErrorKind::Value, "'likes' must have the rank of " + type_str(c.in[0]) + ", got " + type_str(c.in[k]));
    Shape s = xs;
    s[size_t(ax)] = c.in[k].shape[size_t(ax)];
    sum = add_dims(c, sum, s[size_t(ax)]);
    out.push_back({c.in[0].dtype, s});
  }
  if (sum >= 0 && xs[size_t(ax)] >= 0 && sum != xs[size_t(ax)])
    c.fail(ErrorKind::Value, "pieces of total size " + std::to_string(sum) + " do not cover dim " +
                                 std::to_string(ax) + " of " + type_str(c.in[0]));
  return out;
}

std::vector<ValueRef> grad_split_like(GradCtx& c) {
  std::vector<ValueRef> r(c.node.inputs.size());
  r[0] = call(c.g, "concat", c.dy, {{"axis", typed_attrs<AxisAttrs>(c.node).axis}});
  return r;
}

// ---- split ----

std::vector<TensorType> infer_split(InferCtx& c) {
  const int64_t ax = c.axis(c.i("axis"), rank_of(c));
  c.attrs["axis"] = ax;
  if (c.has("num_splits") == c.has("split_sizes"))
    c.fail(ErrorKind::Value, "give exactly one of num_splits and split_sizes");
  const Shape& xs = c.in[0].shape;
  const int64_t n = xs[size_t(ax)];
  Types out;
  if (c.has("num_splits")) {
    const int64_t k = c.i("num_splits");
    if (k <= 0) c.fail(ErrorKind::Value, "num_splits must be positive, got " + std::to_string(k));
    if (n >= 0 && n % k != 0)
      c.fail(ErrorKind::Value, "dim " + std::to_string(ax) + " of " + type_str(c.in[0]) +
                                   " cannot be split into " + std::to_string(k) + " equal parts");
    if (k > (int64_t(1) << 20)) c.fail(ErrorKind::Value, "num_splits " + std::to_string(k) + " is too large");
    Shape s = xs;
    s[size_t(ax)] = n >= 0 ? n / k : -1;
    out.assign(size_t(k), {c.in[0].dtype, s});
  } else {
    const Ints& sizes = c.ints("split_sizes");
    if (sizes.empty()) c.fail(ErrorKind::Value, "split_sizes is empty");
    int64_t sum = 0;
    for (auto v : sizes) {
      if (v < 0) c.fail(ErrorKind::Value, "split_sizes " + ints_str(sizes) + " has a negative size");
      sum = add_dims(c, sum, v);
      Shape s = xs;
      s[size_t(ax)] = v;
      out.push_back({c.in[0].dtype, s});
    }
    if (n >= 0 && sum != n)
      c.fail(ErrorKind::Value, "split_sizes " + ints_str(sizes) + " sum to " + std::to_string(sum) + ", but dim " +
                                   std::to_string(ax) + " of " + type_str(c.in[0]) + " has size " + std::to_string(n));
  }
  return out;
}

std::vector<ValueRef> grad_split(GradCtx& c) {
  return std::vector<ValueRef>{call(c.g, "concat", c.dy, {{"axis", typed_attrs<AxisAttrs>(c.node).axis}})};
}

// ---- stack ----

std::vector<TensorType> infer_stack(InferCtx& c) {
  if (c.in.empty()) c.fail(ErrorKind::Value, "needs at least one tensor");
  Shape s = merge_shapes(c, -1, "stack");
  const int64_t r = int64_t(s.size());
  auto n = normalize_axis(c.i("axis"), r + 1);
  if (!n) c.fail(ErrorKind::Index, "axis " + std::to_string(c.i("axis")) + " is out of range for the rank-" +
                                       std::to_string(r + 1) + " result");
  c.attrs["axis"] = *n;
  s.insert(s.begin() + *n, int64_t(c.in.size()));
  return one(c.in[0].dtype, s);
}

std::vector<ValueRef> grad_stack(GradCtx& c) {
  const int64_t ax = typed_attrs<AxisAttrs>(c.node).axis;
  const size_t r = c.g.type(c.dy[0]).shape.size();
  std::vector<ValueRef> r_(c.node.inputs.size());
  for (size_t i = 0; i < r_.size(); ++i) {
    StridedSliceAttrs a = one_dim_slice(r, size_t(ax), int64_t(i), int64_t(i) + 1, false);
    a.squeeze_mask = int64_t(uint64_t(1) << ax);
    r_[i] = call(c.g, "strided_slice", {c.dy[0]}, slice_attr_map(a));
  }
  return r_;
}

// ---- pad ----

std::vector<TensorType> infer_pad(InferCtx& c) {
  const PadMode m = read_pad_mode(c);
  return one(c.in[0].dtype, padded_shape(c, c.in[0], m));
}

std::vector<ValueRef> grad_pad(GradCtx& c) {
  const PadAttrs& pa = typed_attrs<PadAttrs>(c.node);
  const Ints& l = pa.left_padding;
  const Ints& rp = pa.right_padding;
  if (pa.mode != PadMode::Constant)
    return std::vector<ValueRef>{call(c.g, "pad_gradient", {c.dy[0], c.x(0)},
                                      {{"left_padding", l}, {"right_padding", rp},
                                       {"mode", std::string(pad_mode_name(pa.mode))}})};
  StridedSliceAttrs a{l, Ints(l.size(), 0), Ints(l.size(), 1), 0, 0, 0};
  for (size_t i = 0; i < rp.size(); ++i) {
    if (rp[i] == 0) a.end_mask |= int64_t(uint64_t(1) << i);
    else a.ends[i] = -rp[i];
  }
  return std::vector<ValueRef>{call(c.g, "strided_slice", {c.dy[0]}, slice_attr_map(a))};
}

// ---- pad_gradient ----

std::vector<TensorType> infer_pad_gradient(InferCtx& c) {
  require_class(c, 0, kNumeric);
  const PadMode m = read_pad_mode(c);
  const Shape& ds = c.in[0].shape;
  const Shape& ls = c.in[1].shape;
  if (ds.size() != ls.size())
    c.fail(ErrorKind::Value, "dy " + type_str(c.in[0]) + " and like " + type_str(c.in[1]) + " differ in rank");
  const Ints& l = c.ints("left_padding");
  const Ints& rp = c.ints("right_padding");
  Shape like = ls;
  if (l.size() == ls.size() && rp.size() == ls.size())
    for (size_t i = 0; i < ls.size(); ++i)  // a like dim unknown but dy's known: dy - padding
      if (like[i] < 0 && ds[i] >= 0 && l[i] >= 0 && rp[i] >= 0 && ds[i] - l[i] - rp[i] >= 0 &&
          l[i] <= ds[i] && rp[i] <= ds[i])
        like[i] = ds[i] - l[i] - rp[i];
  Shape want = padded_shape(c, {c.in[1].dtype, like}, m);
  for (size_t i = 0; i < ds.size(); ++i)
    if (ds[i] >= 0 && want[i] >= 0 && ds[i] != want[i])
      c.fail(ErrorKind::Value, "dy " + type_str(c.in[0]) + " is not the shape " + shape_str(want) +
                                   " of like " + type_str(c.in[1]) + " padded by left_padding " + ints_str(l) +
                                   " and right_padding " + ints_str(rp));
  return one(c.in[0].dtype, like);
}

std::vector<ValueRef> grad_pad_gradient(GradCtx& c) {
  const PadAttrs& pa = typed_attrs<PadAttrs>(c.node);
  return std::vector<ValueRef>{
      call(c.g, "pad", {c.dy[0]},
           {{"left_padding", pa.left_padding},
            {"right_padding", pa.right_padding},
            {"mode", std::string(pad_mode_name(pa.mode))}}),
      ValueRef{}};
}

// ---- space_to_depth_2d ----

std::vector<TensorType> infer_space_to_depth_2d(InferCtx& c) {
  int64_t b;
  const bool nchw = read_space_depth(c, b);
  const Shape& xs = c.in[0].shape;
  const size_t hd = nchw ? 2 : 1, wd = nchw ? 3 : 2, cd = nchw ? 1 : 3;
  for (size_t d : {hd, wd})
    if (xs[d] >= 0 && xs[d] % b != 0)
      c.fail(ErrorKind::Value, std::string(d == hd ? "height" : "width") + " " + std::to_string(xs[d]) + " of " +
                                   type_str(c.in[0]) + " (" + c.s("data_layout") +
                                   ") is not a multiple of block_size " + std::to_string(b));
  Shape out = xs;
  out[hd] = xs[hd] >= 0 ? xs[hd] / b : -1;
  out[wd] = xs[wd] >= 0 ? xs[wd] / b : -1;
  out[cd] = mul_dims(c, xs[cd], mul_dims(c, b, b));
  return one(c.in[0].dtype, out);
}

std::vector<ValueRef> grad_space_to_depth_2d(GradCtx& c) {
  return std::vector<ValueRef>{call(c.g, "depth_to_space_2d", {c.dy[0]}, space_depth_attrs(c.node))};
}

// ---- depth_to_space_2d ----

std::vector<TensorType> infer_depth_to_space_2d(InferCtx& c) {
  int64_t b;
  const bool nchw = read_space_depth(c, b);
  const Shape& xs = c.in[0].shape;
  const size_t hd = nchw ? 2 : 1, wd = nchw ? 3 : 2, cd = nchw ? 1 : 3;
  const int64_t bb = mul_dims(c, b, b);
  if (xs[cd] >= 0 && xs[cd] % bb != 0)
    c.fail(ErrorKind::Value, "depth " + std::to_string(xs[cd]) + " of " + type_str(c.in[0]) + " (" +
                                 c.s("data_layout") + ") is not a multiple of block_size * block_size = " +
                                 std::to_string(bb));
  Shape out = xs;
  out[hd] = mul_dims(c, xs[hd], b);
  out[wd] = mul_dims(c, xs[wd], b);
  out[cd] = xs[cd] >= 0 ? xs[cd] / bb : -1;
  return one(c.in[0].dtype, out);
}

std::vector<ValueRef> grad_depth_to_space_2d(GradCtx& c) {
  return std::vector<ValueRef>{call(c.g, "space_to_depth_2d", {c.dy[0]}, space_depth_attrs(c.node))};
}

// ---- band_part ----

std::vector<TensorType> infer_band_part(InferCtx& c) {
  if (c.in[0].shape.size() < 2)
    c.fail(ErrorKind::Value, "needs a tensor of rank >= 2 (matrices in the last two dims), got " +
                                 type_str(c.in[0]));
  return one(c.in[0].dtype, c.in[0].shape);
}

std::vector<ValueRef> grad_band_part(GradCtx& c) {
  const BandPartAttrs& a = typed_attrs<BandPartAttrs>(c.node);
  return std::vector<ValueRef>{
      call(c.g, "band_part", {c.dy[0]}, {{"num_lower", a.num_lower}, {"num_upper", a.num_upper}})};
}

// ---- one_hot ----

std::vector<TensorType> infer_one_hot(InferCtx& c) {
  require_class(c, 0, kInt);
  const int64_t depth = c.i("depth");
  if (depth < 0) c.fail(ErrorKind::Value, "depth must be >= 0, got " + std::to_string(depth));
  const int64_t r = rank_of(c);
  auto ax = normalize_axis(c.i("axis"), r + 1);
  if (!ax)
    c.fail(ErrorKind::Index, "axis " + std::to_string(c.i("axis")) + " is out of range for the rank-" +
                                 std::to_string(r + 1) + " result of one_hot on " + type_str(c.in[0]));
  c.attrs["axis"] = *ax;
  Shape out = c.in[0].shape;
  out.insert(out.begin() + *ax, depth);
  product(c, out, 0, out.size());  // errors when the element count overflows
  return one(c.dtype("dtype"), out);
}

// ---- tile ----

std::vector<TensorType> infer_tile(InferCtx& c) {
  const Ints& m = c.ints("multiples");
  if (int64_t(m.size()) != rank_of(c))
    c.fail(ErrorKind::Value, "multiples " + ints_str(m) + " need one entry per dim of " + type_str(c.in[0]));
  Shape out = c.in[0].shape;
  for (size_t i = 0; i < out.size(); ++i) {
    if (m[i] < 0) c.fail(ErrorKind::Value, "multiples " + ints_str(m) + " has a negative entry");
    out[i] = mul_dims(c, out[i], m[i]);
  }
  return one(c.in[0].dtype, out);
}

std::vector<ValueRef> grad_tile(GradCtx& c) {
  return std::vector<ValueRef>{call(c.g, "tile_gradient", {c.dy[0], c.x(0)},
                                    {{"multiples", typed_attrs<TileAttrs>(c.node).multiples}})};
}

// ---- tile_gradient ----

std::vector<TensorType> infer_tile_gradient(InferCtx& c) {
  require_class(c, 0, kNumeric);
  const Ints& m = c.ints("multiples");
  const Shape& ds = c.in[0].shape;
  const Shape& ls = c.in[1].shape;
  if (m.size() != ls.size() || ds.size() != ls.size())
    c.fail(ErrorKind::Value, "dy " + type_str(c.in[0]) + ", like " + type_str(c.in[1]) + " and multiples " +
                                 ints_str(m) + " differ in rank");
  for (size_t i = 0; i < m.size(); ++i) {
    if (m[i] < 0) c.fail(ErrorKind::Value, "multiples " + ints_str(m) + " has a negative entry");
    int64_t want = mul_dims(c, ls[i], m[i]);
    if (want >= 0 && ds[i] >= 0 && want != ds[i])
      c.fail(ErrorKind::Value, "dy " + type_str(c.in[0]) + " is not 'like' " + type_str(c.in[1]) +
                                   " tiled by " + ints_str(m));
  }
  return one(c.in[0].dtype, ls);
}

std::vector<ValueRef> grad_tile_gradient(GradCtx& c) {
  return std::vector<ValueRef>{
      call(c.g, "tile", {c.dy[0]}, {{"multiples", typed_attrs<TileAttrs>(c.node).multiples}}), ValueRef{}};
}

// ---- reverse ----

std::vector<TensorType> infer_reverse(InferCtx& c) {
  const int64_t r = rank_of(c);
  Ints ax;
  if (c.has("axes")) ax = c.axes(c.ints("axes"), r);
  else
    for (int64_t i = 0; i < r; ++i) ax.push_back(i);
  c.attrs["axes"] = ax;
  return one(c.in[0].dtype, c.in[0].shape);
}

std::vector<ValueRef> grad_reverse(GradCtx& c) {
  return std::vector<ValueRef>{call(c.g, "reverse", {c.dy[0]}, {{"axes", typed_attrs<ReverseAttrs>(c.node).axes}})};
}

// ---- flatten_2d ----

std::vector<TensorType> infer_flatten_2d(InferCtx& c) {
  const int64_t r = rank_of(c);
  int64_t a = c.i("axis");
  if (a < -r || a > r)
    c.fail(ErrorKind::Index, "axis " + std::to_string(a) + " is out of range [-" + std::to_string(r) + ", " +
                                 std::to_string(r) + "] for " + type_str(c.in[0]));
  if (a < 0) a += r;
  c.attrs["axis"] = a;
  const Shape& s = c.in[0].shape;
  return one(c.in[0].dtype, {product(c, s, 0, size_t(a)), product(c, s, size_t(a), s.size())});
}

std::vector<ValueRef> grad_flatten_2d(GradCtx& c) {
  return std::vector<ValueRef>{reshape_like(c.g, c.dy[0], c.x(0))};
}

// ---- flatten ----

std::vector<TensorType> infer_flatten(InferCtx& c) {
  const Shape& s = c.in[0].shape;
  return one(c.in[0].dtype, {product(c, s, 0, s.size())});
}

std::vector<ValueRef> grad_flatten(GradCtx& c) {
  return std::vector<ValueRef>{reshape_like(c.g, c.dy[0], c.x(0))};
}

// ---- shape_of ----

std::vector<TensorType> infer_shape_of(InferCtx& c) {
  for (auto d : c.in[0].shape)
    if (d > std::numeric_limits<int32_t>::max())
      c.fail(ErrorKind::Value, "dim " + std::to_string(d) + " does not fit int32");
  return one(DType::Int32, {rank_of(c)});
}

}  // namespace

void register_shape_ops() {
  // ---------------- reshape ----------------
  reg({.name = "reshape",
       .doc = "Reshapes x to `shape` (same elements, row-major order). One dim may be -1 (or None): it is "
              "inferred from the element count.",
       .inputs = {{"x"}},
       .attrs = {attr("shape", AttrKind::Shape, AttrNone{}, "the new shape; one dim may be -1 to infer it")},
       .infer = infer_reshape,
       .grad = grad_reshape,
       .view = true});

  reg({.name = "reshape_like",
       .doc = "Reshapes x to the shape of `like` (known at run time); element counts must match.",
       .inputs = {{"x"}, {"like"}},
       .infer = infer_reshape_like,
       .grad = grad_reshape_like,
       .view = true});

  // ---------------- transpose ----------------
  reg({.name = "transpose",
       .doc = "Permutes the dims: output dim i is input dim permutation[i]. Without a permutation the dims are "
              "reversed (numpy's transpose).",
       .inputs = {{"x"}},
       .attrs = {optional_attr("permutation", AttrKind::Ints, "a permutation of the dims; default reversed")},
       .decode = attr_decoder(decode_transpose),
       .infer = infer_transpose,
       .grad = grad_transpose,
       .aliases = {"permute"},
       .per_sample = per_sample_transpose});

  reg({.name = "swap_axes",
       .doc = "Swaps two dims (MPSGraph's transposeTensor:dimension:withDimension:).",
       .inputs = {{"x"}},
       .attrs = {attr("axis1", AttrKind::Int), attr("axis2", AttrKind::Int)},
       .decode = attr_decoder(decode_swap_axes),
       .infer = infer_swap_axes,
       .grad = grad_swap_axes,
       .aliases = {"swapaxes"}});

  // ---------------- expand_dims / squeeze ----------------
  reg({.name = "expand_dims",
       .doc = "Inserts dims of size 1 at `axes`, which index the output (as numpy's expand_dims).",
       .inputs = {{"x"}},
       .attrs = {attr("axes", AttrKind::Axes, AttrNone{}, "positions of the new dims in the output")},
       .infer = infer_expand_dims,
       .grad = grad_expand_dims,
       .view = true});

  reg({.name = "squeeze",
       .doc = "Removes dims of size 1: those in `axes`, or without axes every dim that is statically 1 "
              "(resolved when the node is built). Squeezing a dim that is not 1 is an error.",
       .inputs = {{"x"}},
       .attrs = {optional_attr("axes", AttrKind::Axes, "dims to remove; default all dims of static size 1")},
       .infer = infer_squeeze,
       .grad = grad_squeeze,
       .view = true});

  // ---------------- broadcast ----------------
  reg({.name = "broadcast_to",
       .doc = "Broadcasts x to `shape` with numpy's rules (dims of size 1 are repeated; new dims are added at "
              "the front). A -1 (None) in shape keeps the matching dim of x.",
       .inputs = {{"x"}},
       .attrs = {attr("shape", AttrKind::Shape, AttrNone{}, "target shape")},
       .infer = infer_broadcast_to,
       .grad = grad_broadcast_to,
       .aliases = {"broadcast"}});

  // ---------------- slicing ----------------
  reg({.name = "slice",
       .doc = "Takes `length` elements of dim `axis` starting at `start` (negative counts from the end), all of "
              "the other dims (MPSGraph's sliceTensor:dimension:start:length:). Out of range is an error.",
       .inputs = {{"x"}},
       .attrs = {attr("axis", AttrKind::Int), attr("start", AttrKind::Int), attr("length", AttrKind::Int)},
       .decode = attr_decoder(decode_slice),
       .infer = infer_slice,
       .grad = grad_slice});

  reg({.name = "strided_slice",
       .doc = "numpy/Python slicing per dim: starts/ends/strides with one entry per dim of x, clamped like "
              "Python slices; masks select 'from the beginning' / 'to the end' and integer indexing "
              "(squeeze_mask). MPSGraph's sliceTensor:starts:ends:strides:startMask:endMask:squeezeMask:.",
       .inputs = {{"x"}},
       .attrs = slice_attr_specs(),
       .decode = attr_decoder(decode_strided_slice),
       .infer = infer_strided_slice,
       .grad = grad_strided_slice});

  reg({.name = "slice_gradient",
       .doc = "The gradient of strided_slice: a tensor of `like`'s shape that is zero except where the slice "
              "(same attributes) takes elements, which hold dy. MPSGraph's sliceGradientTensor. Its own "
              "gradient is strided_slice.",
       .inputs = {{"dy"}, {"like", false, false, InputRole::ShapeOnly}},
       .attrs = slice_attr_specs(),
       .decode = attr_decoder(decode_strided_slice),
       .infer = infer_slice_gradient,
       .grad = grad_slice_gradient});

  // ---------------- concat / split / stack ----------------
  reg({.name = "concat",
       .doc = "Joins tensors along an existing axis; they share dtype and rank and all other dims.",
       .inputs = {{"tensors", true}},
       .attrs = {attr("axis", AttrKind::Int, int64_t(0))},
       .decode = attr_decoder(decode_axis),
       .infer = infer_concat,
       .grad = grad_concat,
       .aliases = {"concatenate"}});

  reg({.name = "split_like",
       .doc = "Splits x along `axis` into pieces as long as each of `likes` is on that axis (the gradient of "
              "concat; sizes may be known only at run time).",
       .inputs = {{"x"}, {"likes", true}},
       .attrs = {attr("axis", AttrKind::Int, int64_t(0))},
       .decode = attr_decoder(decode_axis),
       .infer = infer_split_like,
       .grad = grad_split_like,
       .multi_output = true});

  reg({.name = "split",
       .doc = "Splits x along `axis` into num_splits equal parts, or into parts of split_sizes (give exactly "
              "one). Returns one tensor per part.",
       .inputs = {{"x"}},
       .attrs = {optional_attr("num_splits", AttrKind::Int, "number of equal parts (must divide the dim)"),
                 optional_attr("split_sizes", AttrKind::Ints, "sizes of the parts (must sum to the dim)"),
                 attr("axis", AttrKind::Int, int64_t(0))},
       .decode = attr_decoder(decode_axis),
       .infer = infer_split,
       .grad = grad_split,
       .multi_output = true});

  reg({.name = "stack",
       .doc = "Stacks tensors of one shape and dtype along a new axis (which indexes the output).",
       .inputs = {{"tensors", true}},
       .attrs = {attr("axis", AttrKind::Int, int64_t(0))},
       .decode = attr_decoder(decode_axis),
       .infer = infer_stack,
       .grad = grad_stack});

  // ---------------- pad / tile / reverse ----------------
  reg({.name = "pad",
       .doc = "Pads each dim with left_padding[i] elements before and right_padding[i] after (MPSGraph's "
              "padTensor:withPaddingMode:). Modes (numpy's np.pad names): 'constant' fills with constant_value; "
              "'reflect' mirrors without repeating the edge element (needs each padding < the dim); 'symmetric' "
              "mirrors including it (padding <= the dim); 'edge' (alias 'clamp_to_edge') repeats the edge element "
              "(the dim must not be empty); 'wrap' (aliases 'periodic', 'circular') continues periodically "
              "(padding <= the dim). Dims with zero padding may have any size.",
       .inputs = {{"x"}},
       .attrs = {attr("left_padding", AttrKind::Ints, AttrNone{}, "elements before, per dim"),
                 attr("right_padding", AttrKind::Ints, AttrNone{}, "elements after, per dim"),
                 attr("mode", AttrKind::String, std::string("constant"),
                      "'constant', 'reflect', 'symmetric', 'edge' or 'wrap'"),
                 attr("constant_value", AttrKind::Float, 0.0, "fill value for mode 'constant'")},
       .decode = attr_decoder(decode_pad),
       .infer = infer_pad,
       .grad = grad_pad});

  reg({.name = "pad_gradient",
       .doc = "The gradient of pad: each element of dy is added to the element of `like` (shape only) that pad "
              "(same left_padding, right_padding and mode) copied there; constant padding drops the border. "
              "MPSGraph's padGradientWithIncomingGradientTensor. Its own gradient is pad.",
       .inputs = {{"dy"}, {"like", false, false, InputRole::ShapeOnly}},
       .attrs = {attr("left_padding", AttrKind::Ints, AttrNone{}, "elements before, per dim"),
                 attr("right_padding", AttrKind::Ints, AttrNone{}, "elements after, per dim"),
                 attr("mode", AttrKind::String, std::string("constant"),
                      "'constant', 'reflect', 'symmetric', 'edge' or 'wrap'")},
       .decode = attr_decoder(decode_pad_gradient),
       .infer = infer_pad_gradient,
       .grad = grad_pad_gradient});

  // ---------------- space_to_depth_2d / depth_to_space_2d ----------------
  reg({.name = "space_to_depth_2d",
       .doc = "Moves each b x b block of the spatial dims H, W into the depth (channel) dim: (N, H, W, C) -> "
              "(N, H/b, W/b, C*b*b) for NHWC, (N, C, H, W) -> (N, C*b*b, H/b, W/b) for NCHW; H and W must be "
              "multiples of b (MPSGraph's spaceToDepth2DTensor with H, W, C axes from data_layout). Within a "
              "block, row i and column j (j fastest) land at depth c*b*b + i*b + j with use_pixel_shuffle_order "
              "(the default: PyTorch's pixel_unshuffle for NCHW), at (i*b + j)*C + c without it (TensorFlow's "
              "space_to_depth, ONNX SpaceToDepth). The inverse is depth_to_space_2d.",
       .inputs = {{"x"}},
       .attrs = space_depth_attr_specs(),
       .decode = attr_decoder(decode_space_depth),
       .infer = infer_space_to_depth_2d,
       .grad = grad_space_to_depth_2d});

  reg({.name = "depth_to_space_2d",
       .doc = "The inverse of space_to_depth_2d: moves depth (channel) values into b x b spatial blocks: "
              "(N, H, W, C) -> (N, H*b, W*b, C/(b*b)) for NHWC, (N, C, H, W) -> (N, C/(b*b), H*b, W*b) for NCHW; "
              "C must be a multiple of b*b (MPSGraph's depthToSpace2DTensor). Output channel c, block row i and "
              "column j read depth c*b*b + i*b + j with use_pixel_shuffle_order (the default: PyTorch's "
              "pixel_shuffle for NCHW, ONNX DepthToSpace mode CRD), (i*b + j)*C_out + c without it "
              "(TensorFlow's depth_to_space, ONNX mode DCR).",
       .inputs = {{"x"}},
       .attrs = space_depth_attr_specs(),
       .decode = attr_decoder(decode_space_depth),
       .infer = infer_depth_to_space_2d,
       .grad = grad_depth_to_space_2d});

  // ---------------- band_part ----------------
  reg({.name = "band_part",
       .doc = "Keeps a band of each matrix in the last two dims and zeroes the rest: element (i, j) is kept when "
              "(num_lower < 0 or i - j <= num_lower) and (num_upper < 0 or j - i <= num_upper). A negative count "
              "keeps that whole triangle: band_part(x, -1, 0) is the lower triangle, (0, 0) the diagonal "
              "(MPSGraph's bandPartWithTensor:numLower:numUpper:, TensorFlow's matrix_band_part).",
       .inputs = {{"x"}},
       .attrs = {attr("num_lower", AttrKind::Int, AttrNone{}, "subdiagonals kept; negative keeps all"),
                 attr("num_upper", AttrKind::Int, AttrNone{}, "superdiagonals kept; negative keeps all")},
       .decode = attr_decoder(decode_band_part),
       .infer = infer_band_part,
       .grad = grad_band_part,
       .aliases = {"matrix_band_part"}});

  // ---------------- one_hot ----------------
  reg({.name = "one_hot",
       .doc = "One-hot encoding of integer indices: a new dim of size depth at `axis` (of the result) holds "
              "on_value where its position equals the index and off_value elsewhere. An index outside "
              "[0, depth) (negative included) gives off_value everywhere, as TensorFlow and MPSGraph do "
              "(MPSGraph's oneHotWithIndicesTensor:depth:axis:dataType:onValue:offValue:). Not differentiable.",
       .inputs = {{"indices", false, false, InputRole::Index}},
       .attrs = {attr("depth", AttrKind::Int, AttrNone{}, "size of the new dim (>= 0)"),
                 attr("axis", AttrKind::Int, int64_t(-1), "position of the new dim in the result, in [-rank-1, rank]"),
                 attr("dtype", AttrKind::DType, DType::Float32, "result dtype"),
                 attr("on_value", AttrKind::Float, 1.0, "value at the index"),
                 attr("off_value", AttrKind::Float, 0.0, "value elsewhere")},
       .decode = attr_decoder(decode_one_hot),
       .infer = infer_one_hot,
       .differentiable = Differentiable::No});

  reg({.name = "tile",
       .doc = "Repeats x multiples[i] times along each dim i (numpy's tile with one multiple per dim).",
       .inputs = {{"x"}},
       .attrs = {attr("multiples", AttrKind::Ints, AttrNone{}, "repetitions per dim (>= 0)")},
       .decode = attr_decoder(decode_tile),
       .infer = infer_tile,
       .grad = grad_tile});

  reg({.name = "tile_gradient",
       .doc = "The gradient of tile: sums the tiles of dy back to `like`'s shape (MPSGraph's "
              "tileGradientWithIncomingGradientTensor). Its own gradient is tile.",
       .inputs = {{"dy"}, {"like", false, false, InputRole::ShapeOnly}},
       .attrs = {attr("multiples", AttrKind::Ints)},
       .decode = attr_decoder(decode_tile),
       .infer = infer_tile_gradient,
       .grad = grad_tile_gradient});

  reg({.name = "reverse",
       .doc = "Reverses the order of elements along `axes` (all dims when absent).",
       .inputs = {{"x"}},
       .attrs = {optional_attr("axes", AttrKind::Axes, "dims to reverse; default all")},
       .decode = attr_decoder(decode_reverse),
       .infer = infer_reverse,
       .grad = grad_reverse,
       .aliases = {"flip"}});

  // ---------------- flatten ----------------
  reg({.name = "flatten_2d",
       .doc = "Reshapes to 2-D: (product of dims before axis, product of dims from axis on). axis is in "
              "[-rank, rank] (MPSGraph's flatten2DTensor:axis:).",
       .inputs = {{"x"}},
       .attrs = {attr("axis", AttrKind::Int, int64_t(1))},
       .infer = infer_flatten_2d,
       .grad = grad_flatten_2d,
       .view = true});

  reg({.name = "flatten",
       .doc = "Reshapes to 1-D.",
       .inputs = {{"x"}},
       .infer = infer_flatten,
       .grad = grad_flatten,
       .aliases = {"ravel"},
       .view = true});

  // ---------------- shape_of ----------------
  reg({.name = "shape_of",
       .doc = "The shape of x as a 1-D int32 tensor (a constant once shapes are known).",
       .inputs = {{"x"}},
       .infer = infer_shape_of,
       .differentiable = Differentiable::No,
       .fold_types = [](const std::vector<TensorType>& in, const Attrs&) -> std::shared_ptr<Array> {
         const Shape& s = in.at(0).shape;
         if (!shape_known(s)) return nullptr;
         auto a = Array::empty(DType::Int32, {int64_t(s.size())});
         auto* p = static_cast<int32_t*>(a->data());
         for (size_t i = 0; i < s.size(); ++i) p[i] = int32_t(s[i]);
         return a;
       }});
}

}  // namespace mg::ops
