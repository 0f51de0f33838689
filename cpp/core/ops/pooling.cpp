// Pooling family.
//
// Primitives pool over the trailing k spatial dims of a channels-first tensor (k =
// len(kernel_sizes); leading dims are batch-like), so 2-D windows on NCHW and MPSGraph's 4-D
// pooling share one kernel:
//   max_pooling_nd, max_pooling_nd_return_indices (values, indices), avg_pooling_nd,
//   sum_pooling_nd (the window sum), and the linear / routing ops their gradients are made of:
//   max_pooling_nd_gradient(dy, source)  dy routed to each window's argmax in source
//   max_pooling_nd_gather(x, source)     x read at each window's argmax in source
//   avg_pooling_nd_gradient, sum_pooling_nd_gradient (dy, source)  the transposed scatters
// Each of these is the other's gradient (gather <-> gradient, pooling <-> scatter), so
// gradients of any order stay inside the family. l2_norm_pooling_nd is the composite
// sqrt(sum_pooling_nd(x * x)) (0 where the window is all zero, with gradient 0 there).
// MPSGraph-named front ends (max_pooling_2d, ..., max_pooling_4d, ..., global pooling) are
// composites: NHWC sources are transposed to NCHW and back.
//
// Max-pooling conventions (PyTorch's): the argmax is the first maximum in row-major window
// order; a NaN wins over any number (the last NaN in the window). Indices are flat row-major
// positions in the unpadded spatial input of each (batch, channel) plane, e.g. h * W + w for
// 2-D, whatever the data layout. Windows that cover only padding give -inf and index -1 (max),
// 0 (average, sum); no gradient flows from them.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/ops/common.h"
#include "core/ops/gradient_composite.h"
#include "core/ops/pooling_attrs.h"

namespace mg::ops {

using Ints = std::vector<int64_t>;

// ---------------- geometry (declared in pooling_geom.h) ----------------

std::string pool_dims(const PoolSpec& s, const Ints& in, std::vector<PoolDim>& dims) {
  const size_t k = s.k();
  dims.assign(k, PoolDim{});
  const bool same = s.style == "same" || s.style == "same_lower";
  for (size_t d = 0; d < k; ++d) {
    PoolDim& p = dims[d];
    const int64_t kk = s.kernel[d], st = s.stride[d], dl = s.dilation[d];
    const int64_t ext = (kk - 1) * dl + 1;  // attributes are bounded (< 2^31): no overflow
    p.in = in[d];
    if (same) {
      if (p.in < 0) continue;
      p.out = (p.in + st - 1) / st;
      int64_t total = std::max<int64_t>((p.out - 1) * st + ext - p.in, 0);
      if (p.out == 0) total = 0;
      p.before = s.style == "same" ? total / 2 : total - total / 2;
      p.after = total - p.before;
      continue;
    }
    if (s.style == "valid") {
      p.before = p.after = 0;
    } else {
      p.before = s.padding[2 * d];
      p.after = s.padding[2 * d + 1];
    }
    if (p.in < 0) continue;
    const int64_t len = p.in + p.before + p.after;
    if (len < ext)
      return "window " + std::to_string(kk) + " with dilation " + std::to_string(dl) +
             " does not fit in padded input of size " + std::to_string(len);
    if (s.ceil_mode) {
      p.out = (len - ext + st - 1) / st + 1;
      if ((p.out - 1) * st >= p.in + p.before) --p.out;  // the last window must start inside
    } else {
      p.out = (len - ext) / st + 1;
    }
  }
  return "";
}

namespace {

// A pooling node's window, from its attributes as inference normalised them (full lists).
PoolSpec pool_spec_from_attrs(const Attrs& a) {
  PoolSpec s;
  s.kernel = get_attr<Ints>(a, "kernel_sizes");
  s.stride = get_attr<Ints>(a, "strides");
  s.dilation = get_attr<Ints>(a, "dilation_rates");
  s.padding = get_attr<Ints>(a, "padding");
  s.style = get_attr<std::string>(a, "padding_style");
  s.ceil_mode = get_attr<bool>(a, "ceil_mode");
  return s;
}

// The window pools the trailing dims: each sample pooled alone unless they take in the batch
// axis with more than one tap, a stride or padding along it.
bool per_sample_pooling(const Node& n, const std::vector<TensorType>& in, const std::vector<char>& batched) {
  if (!per_sample_first_input(n, in, batched)) return false;
  const PoolSpec& s = typed_attrs<PoolingAttrs>(n).window;
  if (s.k() < in[0].shape.size()) return true;
  if (s.kernel.empty() || s.kernel[0] != 1 || s.stride.empty() || s.stride[0] != 1) return false;
  return s.padding.size() < 2 || (s.padding[0] == 0 && s.padding[1] == 0);
}

// ---- typed attributes of the primitives (pooling_attrs.h) ----

PoolingAttrs decode_pooling(const Attrs& a) { return {pool_spec_from_attrs(a), PoolDivisor::None, DType::Int32}; }
PoolingAttrs decode_avg_pooling(const Attrs& a) {
  return {pool_spec_from_attrs(a),
          get_attr<bool>(a, "include_zero_pad") ? PoolDivisor::PaddedTaps : PoolDivisor::ValidTaps, DType::Int32};
}
PoolingAttrs decode_max_pooling_indices(const Attrs& a) {
  return {pool_spec_from_attrs(a), PoolDivisor::None, get_attr<DType>(a, "indices_dtype")};
}

constexpr int64_t kMaxAttr = int64_t(1) << 30;
constexpr size_t kMaxPoolDims = 8;

std::string ints_str(const Ints& v) {
  std::string r = "(";
  for (size_t i = 0; i < v.size(); ++i) r += (i ? ", " : "") + std::to_string(v[i]);
  if (v.size() == 1) r += ",";
  return r + ")";
}

const std::vector<std::string> kPoolAttrNames = {"kernel_sizes", "strides",   "dilation_rates",
                                                 "padding_style", "padding", "ceil_mode"};

std::vector<AttrSpec> pool_attr_specs(bool strides_required, size_t k_default) {
  std::vector<AttrSpec> a;
  a.push_back(attr("kernel_sizes", AttrKind::Ints, AttrNone{}, "window size per pooled dim"));
  if (strides_required)
    a.push_back(attr("strides", AttrKind::Ints, AttrNone{}, "step per pooled dim"));
  else
    a.push_back(k_default ? attr("strides", AttrKind::Ints, Ints(k_default, 1), "step per pooled dim")
                          : optional_attr("strides", AttrKind::Ints, "step per pooled dim; 1 when omitted"));
  a.push_back(k_default ? attr("dilation_rates", AttrKind::Ints, Ints(k_default, 1), "dilation per pooled dim")
                        : optional_attr("dilation_rates", AttrKind::Ints, "dilation per pooled dim; 1 when omitted"));
  a.push_back(attr("padding_style", AttrKind::String, std::string("explicit"),
                   "'explicit' (use padding), 'valid' (none), 'same' (TF_SAME: out = ceil(in / stride), odd "
                   "padding after) or 'same_lower' (odd padding before)"));
  a.push_back(k_default ? attr("padding", AttrKind::Ints, Ints(2 * k_default, 0),
                               "explicit padding: before and after per pooled dim, in dim order (one value: all; "
                               "one per dim: symmetric)")
                        : optional_attr("padding", AttrKind::Ints,
                                        "explicit padding: before and after per pooled dim, in dim order (one "
                                        "value: all; one per dim: symmetric); 0 when omitted"));
  a.push_back(attr("ceil_mode", AttrKind::Bool, false, "round the output size up (PyTorch's ceil_mode)"));
  return a;
}

// Normalises the pooling attributes for k pooled dims and stores them back: every list full
// length, values checked. `dims_doc` names the pooled dims in messages ("H, W").
void normalize_pool_attrs(InferCtx& c, size_t k, const std::string& dims_doc) {
  auto list = [&](const char* name, int64_t dflt, int64_t lo) {
    Ints v;
    if (!c.has(name)) {
      v.assign(k, dflt);
    } else {
      const Ints& g = c.ints(name);
      if (g.size() == k) v = g;
      else if (g.size() == 1) v.assign(k, g[0]);
      else
        c.fail(ErrorKind::Value, std::string(name) + " " + ints_str(g) + " needs " + std::to_string(k) +
                                     " values (one per pooled dim " + dims_doc + ")");
    }
    for (auto x : v)
      if (x < lo || x > kMaxAttr)
        c.fail(ErrorKind::Value, std::string(name) + " " + ints_str(c.has(name) ? c.ints(name) : v) + " must be " +
                                     (lo ? "positive" : "non-negative") + " (and at most 2**30)");
    c.attrs[name] = v;
  };
  list("kernel_sizes", 1, 1);
  list("strides", 1, 1);
  list("dilation_rates", 1, 1);
  Ints pad;
  if (!c.has("padding")) {
    pad.assign(2 * k, 0);
  } else {
    const Ints& g = c.ints("padding");
    if (g.size() == 2 * k) pad = g;
    else if (g.size() == 1) pad.assign(2 * k, g[0]);
    else if (g.size() == k)
      for (auto p : g) pad.insert(pad.end(), {p, p});
    else
      c.fail(ErrorKind::Value, "padding " + ints_str(g) + " needs " + std::to_string(2 * k) +
                                   " values (before and after per pooled dim " + dims_doc + "), " +
                                   std::to_string(k) + " (symmetric) or 1");
    for (auto p : pad)
      if (p < 0 || p > kMaxAttr)
        c.fail(ErrorKind::Value, "padding " + ints_str(g) + " must be non-negative (and at most 2**30)");
  }
  c.attrs["padding"] = pad;
  const std::string& st = c.s("padding_style");
  if (st != "explicit" && st != "valid" && st != "same" && st != "same_lower")
    c.fail(ErrorKind::Value, "padding_style must be 'explicit', 'valid', 'same' or 'same_lower', not '" + st + "'");
}

// Pooled shape of `src` over `axes` (attributes normalised); fails with the source's type.
Shape pooled_shape(InferCtx& c, const TensorType& src, const std::vector<size_t>& axes, const char* what = "source") {
  PoolSpec s = pool_spec_from_attrs(c.attrs);
  Ints in;
  for (auto a : axes) in.push_back(src.shape[a]);
  std::vector<PoolDim> dims;
  std::string err = pool_dims(s, in, dims);
  if (!err.empty()) c.fail(ErrorKind::Value, err + " (" + what + " " + type_str(src) + ")");
  Shape out = src.shape;
  for (size_t i = 0; i < axes.size(); ++i) out[axes[i]] = dims[i].out;
  return out;
}

std::vector<size_t> trailing_axes(size_t rank, size_t k) {
  std::vector<size_t> a;
  for (size_t i = rank - k; i < rank; ++i) a.push_back(i);
  return a;
}

bool compatible(const Shape& a, const Shape& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] >= 0 && b[i] >= 0 && a[i] != b[i]) return false;
  return true;
}

// Checks a primitive's source (float, rank >= k), normalises its attributes; returns the
// pooled shape of input `src_index`.
Shape primitive_pooled(InferCtx& c, size_t src_index) {
  require_class(c, src_index, kFloat);
  const size_t k = c.ints("kernel_sizes").size();
  if (k == 0) c.fail(ErrorKind::Value, "kernel_sizes is empty");
  if (k > kMaxPoolDims)
    c.fail(ErrorKind::NotImplemented, "pooling over " + std::to_string(k) + " dims; at most " +
                                          std::to_string(kMaxPoolDims) + " are supported");
  const TensorType& src = c.in[src_index];
  if (src.shape.size() < k)
    c.fail(ErrorKind::Value, "kernel_sizes " + ints_str(c.ints("kernel_sizes")) + " pool " + std::to_string(k) +
                                 " trailing dims, but source " + type_str(src) + " has rank " +
                                 std::to_string(src.shape.size()));
  normalize_pool_attrs(c, k, "of the trailing " + std::to_string(k));
  return pooled_shape(c, src, trailing_axes(src.shape.size(), k));
}

Attrs pool_attrs_of(const Attrs& a, bool with_zero_pad = false) {
  Attrs r;
  for (auto& n : kPoolAttrNames) r[n] = a.at(n);
  if (with_zero_pad) r["include_zero_pad"] = a.at("include_zero_pad");
  return r;
}

const char* kPrimitiveNote =
    " Pools over the trailing len(kernel_sizes) dims of a channels-first tensor; leading dims are batch-like.";

// ---- front ends ----

struct Layout2D {
  std::vector<size_t> spatial;  // H, W axes
  bool nhwc;
};

Layout2D layout_2d(InferCtx& c) {
  const std::string& l = c.s("data_layout");
  if (l != "NHWC" && l != "NCHW") c.fail(ErrorKind::Value, "data_layout must be 'NHWC' or 'NCHW', not '" + l + "'");
  if (c.in[0].shape.size() != 4)
    c.fail(ErrorKind::Value, "expects a rank-4 " + l + " source, got " + type_str(c.in[0]));
  bool nhwc = l == "NHWC";
  return {nhwc ? std::vector<size_t>{1, 2} : std::vector<size_t>{2, 3}, nhwc};
}

const Ints kToNCHW = {0, 3, 1, 2}, kToNHWC = {0, 2, 3, 1};

ValueRef transpose(Graph& g, ValueRef x, const Ints& perm) { return call(g, "transpose", {x}, {{"permutation", perm}}); }

// Runs primitive `op` (with the pooling attrs and `extra`) on NCHW data, transposing NHWC.
std::vector<ValueRef> run_2d(Graph& g, const std::string& op, ValueRef x, const Attrs& a,
                             const std::vector<std::string>& extra) {
  bool nhwc = std::get<std::string>(a.at("data_layout")) == "NHWC";
  Attrs pa = pool_attrs_of(a);
  for (auto& e : extra) pa[e] = a.at(e);
  if (nhwc) x = transpose(g, x, kToNCHW);
  std::vector<ValueRef> r = g.add(op, {x}, pa);
  if (nhwc)
    for (auto& v : r) v = transpose(g, v, kToNHWC);
  return r;
}

std::vector<AttrSpec> with(std::vector<AttrSpec> a, std::vector<AttrSpec> more) {
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

AttrSpec layout_attr() {
  return attr("data_layout", AttrKind::String, std::string("NHWC"), "'NHWC' (MPSGraph's default) or 'NCHW'");
}
AttrSpec zero_pad_attr() {
  return attr("include_zero_pad", AttrKind::Bool, false,
              "count padding in the divisor (MPSGraph's includeZeroPadToAverage, PyTorch's count_include_pad; "
              "taps past the padded input never count)");
}
AttrSpec indices_dtype_attr() {
  return attr("indices_dtype", AttrKind::DType, DType::Int32, "dtype of the indices: int32 or int64");
}

void check_indices_dtype(InferCtx& c) {
  DType d = c.dtype("indices_dtype");
  if (d != DType::Int32 && d != DType::Int64)
    c.fail(ErrorKind::Type, std::string("indices_dtype must be int32 or int64, got ") + dtype_name(d));
}

ValueRef l2_of(Graph& g, ValueRef x, const Attrs& pool_attrs) {
  ValueRef s = call(g, "sum_pooling_nd", {call(g, "multiplication", {x, x})}, pool_attrs);
  ValueRef zero = scalar_like(g, 0.0, s);
  ValueRef pos = call(g, "greater_than", {s, zero});
  ValueRef safe = call(g, "select", {pos, s, scalar_like(g, 1.0, s)});
  return call(g, "select", {pos, call(g, "square_root", {safe}), zero});
}


// ---- max_pooling_nd ----

std::vector<TensorType> infer_max_pooling_nd(InferCtx& c) {
  return std::vector<TensorType>{{c.in[0].dtype, primitive_pooled(c, 0)}};
}

std::vector<ValueRef> grad_max_pooling_nd(GradCtx& c) {
  if (!c.dy[0].valid()) return std::vector<ValueRef>{ValueRef{}};
  return std::vector<ValueRef>{
      call(c.g, "max_pooling_nd_gradient", {c.dy[0], c.x(0)}, pool_attrs_of(c.node.attrs))};
}

// ---- max_pooling_nd_return_indices ----

std::vector<TensorType> infer_max_pooling_nd_return_indices(InferCtx& c) {
  check_indices_dtype(c);
  Shape s = primitive_pooled(c, 0);
  return std::vector<TensorType>{{c.in[0].dtype, s}, {c.dtype("indices_dtype"), s}};
}

std::vector<ValueRef> grad_max_pooling_nd_return_indices(GradCtx& c) {
  if (!c.dy[0].valid()) return std::vector<ValueRef>{ValueRef{}};
  return std::vector<ValueRef>{
      call(c.g, "max_pooling_nd_gradient", {c.dy[0], c.x(0)}, pool_attrs_of(c.node.attrs))};
}

// ---- max_pooling_nd_gradient ----

std::vector<TensorType> infer_max_pooling_nd_gradient(InferCtx& c) {
  Shape pooled = primitive_pooled(c, 1);
  c.same_dtype(0, 1);
  if (!compatible(c.in[0].shape, pooled))
    c.fail(ErrorKind::Value, "dy " + type_str(c.in[0]) + " does not match the pooled shape " +
                                 shape_str(pooled) + " of source " + type_str(c.in[1]));
  return std::vector<TensorType>{c.in[1]};
}

std::vector<ValueRef> grad_max_pooling_nd_gradient(GradCtx& c) {
  if (!c.dy[0].valid()) return std::vector<ValueRef>{ValueRef{}, ValueRef{}};
  return std::vector<ValueRef>{
      call(c.g, "max_pooling_nd_gather", {c.dy[0], c.x(1)}, pool_attrs_of(c.node.attrs)), ValueRef{}};
}

// ---- max_pooling_nd_gather ----

std::vector<TensorType> infer_max_pooling_nd_gather(InferCtx& c) {
  Shape pooled = primitive_pooled(c, 1);
  c.same_dtype(0, 1);
  if (!compatible(c.in[0].shape, c.in[1].shape))
    c.fail(ErrorKind::Value, "x " + type_str(c.in[0]) + " does not match source " + type_str(c.in[1]));
  return std::vector<TensorType>{{c.in[0].dtype, pooled}};
}

std::vector<ValueRef> grad_max_pooling_nd_gather(GradCtx& c) {
  if (!c.dy[0].valid()) return std::vector<ValueRef>{ValueRef{}, ValueRef{}};
  return std::vector<ValueRef>{
      call(c.g, "max_pooling_nd_gradient", {c.dy[0], c.x(1)}, pool_attrs_of(c.node.attrs)), ValueRef{}};
}

// ---- l2_norm_pooling_nd ----

std::vector<TensorType> infer_l2_norm_pooling_nd(InferCtx& c) {
  return std::vector<TensorType>{{c.in[0].dtype, primitive_pooled(c, 0)}};
}

std::vector<ValueRef> expand_l2_norm_pooling_nd(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  return std::vector<ValueRef>{l2_of(g, in[0], pool_attrs_of(a))};
}


// ---- avg_pooling_nd, sum_pooling_nd and their gradients (linear pooling) ----

std::vector<TensorType> infer_linear_pooling(InferCtx& c) {
  return std::vector<TensorType>{{c.in[0].dtype, primitive_pooled(c, 0)}};
}

std::vector<TensorType> infer_linear_pooling_gradient(InferCtx& c) {
  Shape pooled = primitive_pooled(c, 1);
  c.same_dtype(0, 1);
  if (!compatible(c.in[0].shape, pooled))
    c.fail(ErrorKind::Value, "dy " + type_str(c.in[0]) + " does not match the pooled shape " + shape_str(pooled) +
                                 " of source " + type_str(c.in[1]));
  return std::vector<TensorType>{c.in[1]};
}

// pooling -> its transposed scatter
std::vector<ValueRef> linear_pooling_grad(GradCtx& c, const char* transpose, bool avg) {
  if (!c.dy[0].valid()) return std::vector<ValueRef>{ValueRef{}};
  return std::vector<ValueRef>{call(c.g, transpose, {c.dy[0], c.x(0)}, pool_attrs_of(c.node.attrs, avg))};
}
std::vector<ValueRef> grad_avg_pooling_nd(GradCtx& c) { return linear_pooling_grad(c, "avg_pooling_nd_gradient", true); }
std::vector<ValueRef> grad_sum_pooling_nd(GradCtx& c) { return linear_pooling_grad(c, "sum_pooling_nd_gradient", false); }

// transposed scatter -> the pooling (linear in dy; source gives only the shape)
std::vector<ValueRef> linear_pooling_gradient_grad(GradCtx& c, const char* pooling, bool avg) {
  if (!c.dy[0].valid()) return std::vector<ValueRef>{ValueRef{}, ValueRef{}};
  return std::vector<ValueRef>{call(c.g, pooling, {c.dy[0]}, pool_attrs_of(c.node.attrs, avg)), ValueRef{}};
}
std::vector<ValueRef> grad_avg_pooling_nd_gradient(GradCtx& c) { return linear_pooling_gradient_grad(c, "avg_pooling_nd", true); }
std::vector<ValueRef> grad_sum_pooling_nd_gradient(GradCtx& c) { return linear_pooling_gradient_grad(c, "sum_pooling_nd", false); }

// ---- 2-D front ends (MPSGraph's Pooling2DOpDescriptor) ----

const char* const kDoc2d =
    " source is rank 4 in data_layout (NHWC as MPSGraph by default, or NCHW); kernel_sizes, strides and "
    "dilation_rates are (H, W) (one value: both); padding is (top, bottom, left, right), i.e. before and after "
    "per dim in H, W order (one value: all; two: symmetric per dim).";

std::vector<AttrSpec> attrs_2d(std::vector<AttrSpec> extra) {
  return with(with(pool_attr_specs(true, 2), {layout_attr()}), std::move(extra));
}

std::vector<TensorType> pooled_2d(InferCtx& c, bool indices) {
  require_class(c, 0, kFloat);
  Layout2D l = layout_2d(c);
  normalize_pool_attrs(c, 2, "H, W");
  Shape s = pooled_shape(c, c.in[0], l.spatial);
  std::vector<TensorType> r{{c.in[0].dtype, s}};
  if (indices) {
    check_indices_dtype(c);
    r.push_back({c.dtype("indices_dtype"), s});
  }
  return r;
}
std::vector<TensorType> infer_pooling_2d(InferCtx& c) { return pooled_2d(c, false); }
std::vector<TensorType> infer_pooling_2d_return_indices(InferCtx& c) { return pooled_2d(c, true); }

std::vector<ValueRef> expand_max_pooling_2d(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  return run_2d(g, "max_pooling_nd", in[0], a, {});
}
std::vector<ValueRef> expand_max_pooling_2d_return_indices(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  return run_2d(g, "max_pooling_nd_return_indices", in[0], a, {"indices_dtype"});
}
std::vector<ValueRef> expand_avg_pooling_2d(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  return run_2d(g, "avg_pooling_nd", in[0], a, {"include_zero_pad"});
}
std::vector<ValueRef> expand_l2_norm_pooling_2d(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  return run_2d(g, "l2_norm_pooling_nd", in[0], a, {});
}

// ---- 4-D front ends (MPSGraph's Pooling4DOpDescriptor) ----

const char* const kDoc4d =
    " Pools over all 4 dims of a rank-4 source; kernel_sizes, strides and dilation_rates have 4 values (one: all), "
    "padding 8 (before and after per dim, as MPSGraph's paddingValues).";

std::vector<AttrSpec> attrs_4d(std::vector<AttrSpec> extra) { return with(pool_attr_specs(false, 4), std::move(extra)); }

std::vector<TensorType> pooled_4d(InferCtx& c, bool indices) {
  require_class(c, 0, kFloat);
  if (c.in[0].shape.size() != 4) c.fail(ErrorKind::Value, "expects a rank-4 source, got " + type_str(c.in[0]));
  normalize_pool_attrs(c, 4, "0-3");
  Shape s = pooled_shape(c, c.in[0], {0, 1, 2, 3});
  std::vector<TensorType> r{{c.in[0].dtype, s}};
  if (indices) {
    check_indices_dtype(c);
    r.push_back({c.dtype("indices_dtype"), s});
  }
  return r;
}
std::vector<TensorType> infer_pooling_4d(InferCtx& c) { return pooled_4d(c, false); }
std::vector<TensorType> infer_pooling_4d_return_indices(InferCtx& c) { return pooled_4d(c, true); }

// Runs primitive `op` with the pooling attrs and `extra` on the 4-d source as it is.
std::vector<ValueRef> run_4d(Graph& g, const std::string& op, ValueRef x, const Attrs& a,
                             const std::vector<std::string>& extra) {
  Attrs pa = pool_attrs_of(a);
  for (auto& e : extra) pa[e] = a.at(e);
  return g.add(op, {x}, pa);
}
std::vector<ValueRef> expand_max_pooling_4d(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  return run_4d(g, "max_pooling_nd", in[0], a, {});
}
std::vector<ValueRef> expand_max_pooling_4d_return_indices(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  return run_4d(g, "max_pooling_nd_return_indices", in[0], a, {"indices_dtype"});
}
std::vector<ValueRef> expand_avg_pooling_4d(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  return run_4d(g, "avg_pooling_nd", in[0], a, {"include_zero_pad"});
}
std::vector<ValueRef> expand_l2_norm_pooling_4d(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  return run_4d(g, "l2_norm_pooling_nd", in[0], a, {});
}

// ---- global pooling ----

const char* const kDocGlobal =
    " over H and W of a rank-4 source in data_layout, keeping them as size-1 dims: (N, 1, 1, C) for NHWC, "
    "(N, C, 1, 1) for NCHW.";

std::vector<TensorType> infer_global_pooling_2d(InferCtx& c) {
  require_class(c, 0, kFloat);
  Layout2D l = layout_2d(c);
  Shape s = c.in[0].shape;
  for (auto a : l.spatial) {
    if (s[a] == 0) c.fail(ErrorKind::Value, "cannot pool an empty plane: source " + type_str(c.in[0]));
    s[a] = 1;
  }
  return std::vector<TensorType>{{c.in[0].dtype, s}};
}

// `reduction` over the source's H and W, kept as size-1 dims.
std::vector<ValueRef> global_reduce(Graph& g, const char* reduction, ValueRef x, const Attrs& a) {
  bool nhwc = get_attr<std::string>(a, "data_layout") == "NHWC";
  Ints axes = nhwc ? Ints{1, 2} : Ints{2, 3};
  return std::vector<ValueRef>{call(g, reduction, {x}, {{"axes", axes}, {"keep_dims", true}})};
}
std::vector<ValueRef> expand_global_average_pooling_2d(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  return global_reduce(g, "mean", in[0], a);
}
std::vector<ValueRef> expand_global_max_pooling_2d(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  return global_reduce(g, "reduction_maximum", in[0], a);
}

}  // namespace

void register_pooling_ops() {
  // ---------------- primitives ----------------
  register_op({.name = "max_pooling_nd",
               .doc = std::string("Maximum over each pooling window; padding never wins (it is -inf).") + kPrimitiveNote,
               .inputs = {{"source"}},
               .attrs = pool_attr_specs(false, 0),
               .decode = attr_decoder(decode_pooling),
               .infer = infer_max_pooling_nd,
               .grad = grad_max_pooling_nd,
               .family = "pooling",
               .per_sample = per_sample_pooling});
  register_op({.name = "max_pooling_nd_return_indices",
               .doc = std::string("max_pooling_nd and the argmax of each window as a flat row-major index into "
                                  "the unpadded spatial input of its (batch, channel) plane (PyTorch's "
                                  "return_indices; MPSGraph's GlobalFlatten modes). Ties: the first maximum.") +
                      kPrimitiveNote,
               .inputs = {{"source"}},
               .attrs = with(pool_attr_specs(false, 0), {indices_dtype_attr()}),
               .decode = attr_decoder(decode_max_pooling_indices),
               .infer = infer_max_pooling_nd_return_indices,
               .grad = grad_max_pooling_nd_return_indices,
               .multi_output = true,
               .family = "pooling"});
  register_op({.name = "max_pooling_nd_gradient",
               .doc = "Gradient of max_pooling_nd: a tensor of source's shape, zero except at each window's "
                      "argmax in source, which accumulates that window's dy (MPSGraph's "
                      "maxPoolingGradientWithGradientTensor:sourceTensor:). Its gradient w.r.t. dy is "
                      "max_pooling_nd_gather; w.r.t. source it is zero almost everywhere.",
               .inputs = {{"dy"}, {"source"}},
               .attrs = pool_attr_specs(false, 0),
               .decode = attr_decoder(decode_pooling),
               .infer = infer_max_pooling_nd_gradient,
               .grad = grad_max_pooling_nd_gradient,
               .family = "pooling"});
  register_op({.name = "max_pooling_nd_gather",
               .doc = "x (of source's shape) read at each pooling window's argmax in source: pooled shape. "
                      "The gradient of max_pooling_nd_gradient w.r.t. dy; its own gradient w.r.t. x is "
                      "max_pooling_nd_gradient. Windows of padding only give 0.",
               .inputs = {{"x"}, {"source"}},
               .attrs = pool_attr_specs(false, 0),
               .decode = attr_decoder(decode_pooling),
               .infer = infer_max_pooling_nd_gather,
               .grad = grad_max_pooling_nd_gather,
               .family = "pooling"});

  // linear pooling (average, sum) and their transposes
  register_op({.name = "avg_pooling_nd",
               .doc = std::string("Mean over each pooling window. The divisor counts the window taps inside the input, "
                                  "or with include_zero_pad also those in the padding (not those past it, as "
                                  "PyTorch's count_include_pad).") +
                      kPrimitiveNote,
               .inputs = {{"source"}},
               .attrs = with(pool_attr_specs(false, 0), {zero_pad_attr()}),
               .decode = attr_decoder(decode_avg_pooling),
               .infer = infer_linear_pooling,
               .grad = grad_avg_pooling_nd,
               .family = "pooling",
               .per_sample = per_sample_pooling});
  register_op({.name = "avg_pooling_nd_gradient",
               .doc = "Gradient of avg_pooling_nd: each window's dy divided by its divisor, added to the window's taps "
                      "(MPSGraph's avgPoolingGradientWithGradientTensor:sourceTensor:); source gives only the shape. "
                      "Linear: its gradient w.r.t. dy is avg_pooling_nd.",
               .inputs = {{"dy"}, {"source", false, false, InputRole::ShapeOnly}},
               .attrs = with(pool_attr_specs(false, 0), {zero_pad_attr()}),
               .decode = attr_decoder(decode_avg_pooling),
               .infer = infer_linear_pooling_gradient,
               .grad = grad_avg_pooling_nd_gradient,
               .family = "pooling"});
  register_op({.name = "sum_pooling_nd",
               .doc = std::string("Sum over each pooling window (padding adds 0).") + kPrimitiveNote,
               .inputs = {{"source"}},
               .attrs = pool_attr_specs(false, 0),
               .decode = attr_decoder(decode_pooling),
               .infer = infer_linear_pooling,
               .grad = grad_sum_pooling_nd,
               .family = "pooling",
               .per_sample = per_sample_pooling});
  register_op({.name = "sum_pooling_nd_gradient",
               .doc = "Gradient of sum_pooling_nd: each window's dy added to the window's taps; source gives only the "
                      "shape. Linear: its gradient w.r.t. dy is sum_pooling_nd.",
               .inputs = {{"dy"}, {"source", false, false, InputRole::ShapeOnly}},
               .attrs = pool_attr_specs(false, 0),
               .decode = attr_decoder(decode_pooling),
               .infer = infer_linear_pooling_gradient,
               .grad = grad_sum_pooling_nd_gradient,
               .family = "pooling"});

  register_op({.name = "l2_norm_pooling_nd",
               .doc = std::string("sqrt(sum of squares) over each pooling window: the composite "
                                  "sqrt(sum_pooling_nd(x * x)), 0 (with gradient 0) where the window sums to 0.") +
                      kPrimitiveNote,
               .inputs = {{"source"}},
               .attrs = pool_attr_specs(false, 0),
               .infer = infer_l2_norm_pooling_nd,
               .family = "pooling",
               .expand = expand_l2_norm_pooling_nd});

  // ---------------- 2-D front ends (MPSGraph's Pooling2DOpDescriptor) ----------------
  register_op({.name = "max_pooling_2d",
               .doc = std::string("2-D max pooling (MPSGraph's maxPooling2D).") + kDoc2d,
               .inputs = {{"source"}},
               .attrs = attrs_2d({}),
               .infer = infer_pooling_2d,
               .family = "pooling",
               .expand = expand_max_pooling_2d});
  register_op({.name = "max_pooling_2d_return_indices",
               .doc = std::string("2-D max pooling returning (values, indices); indices are flat h * W + w positions "
                                  "in the unpadded input plane of each (batch, channel), whatever the layout "
                                  "(PyTorch's return_indices; MPSGraph's GlobalFlatten2D).") +
                      kDoc2d,
               .inputs = {{"source"}},
               .attrs = attrs_2d({indices_dtype_attr()}),
               .infer = infer_pooling_2d_return_indices,
               .multi_output = true,
               .family = "pooling",
               .expand = expand_max_pooling_2d_return_indices});
  register_op_with_gradient_composite({.name = "avg_pooling_2d",
               .doc = std::string("2-D average pooling (MPSGraph's avgPooling2D).") + kDoc2d,
               .inputs = {{"source"}},
               .attrs = attrs_2d({zero_pad_attr()}),
               .infer = infer_pooling_2d,
               .family = "pooling",
               .expand = expand_avg_pooling_2d}, {0});
  register_op({.name = "l2_norm_pooling_2d",
               .doc = std::string("2-D L2-norm pooling: sqrt of the window's sum of squares.") + kDoc2d,
               .inputs = {{"source"}},
               .attrs = attrs_2d({}),
               .infer = infer_pooling_2d,
               .family = "pooling",
               .expand = expand_l2_norm_pooling_2d});

  // ---------------- 4-D front ends (MPSGraph's Pooling4DOpDescriptor) ----------------
  register_op({.name = "max_pooling_4d",
               .doc = std::string("4-D max pooling (MPSGraph's maxPooling4D).") + kDoc4d,
               .inputs = {{"source"}},
               .attrs = attrs_4d({}),
               .infer = infer_pooling_4d,
               .family = "pooling",
               .expand = expand_max_pooling_4d});
  register_op({.name = "max_pooling_4d_return_indices",
               .doc = std::string("4-D max pooling returning (values, indices); indices are flat row-major positions "
                                  "in the whole unpadded input (MPSGraph's GlobalFlatten4D).") +
                      kDoc4d,
               .inputs = {{"source"}},
               .attrs = attrs_4d({indices_dtype_attr()}),
               .infer = infer_pooling_4d_return_indices,
               .multi_output = true,
               .family = "pooling",
               .expand = expand_max_pooling_4d_return_indices});
  register_op_with_gradient_composite({.name = "avg_pooling_4d",
               .doc = std::string("4-D average pooling (MPSGraph's avgPooling4D).") + kDoc4d,
               .inputs = {{"source"}},
               .attrs = attrs_4d({zero_pad_attr()}),
               .infer = infer_pooling_4d,
               .family = "pooling",
               .expand = expand_avg_pooling_4d}, {0});
  register_op({.name = "l2_norm_pooling_4d",
               .doc = std::string("4-D L2-norm pooling (MPSGraph's L2NormPooling4D): sqrt of the window's sum of "
                                  "squares.") +
                      kDoc4d,
               .inputs = {{"source"}},
               .attrs = attrs_4d({}),
               .infer = infer_pooling_4d,
               .family = "pooling",
               .expand = expand_l2_norm_pooling_4d});

  // ---------------- global pooling ----------------
  register_op({.name = "global_average_pooling_2d",
               .doc = std::string("Mean") + kDocGlobal,
               .inputs = {{"source"}},
               .attrs = {layout_attr()},
               .infer = infer_global_pooling_2d,
               .family = "pooling",
               .expand = expand_global_average_pooling_2d});
  register_op({.name = "global_max_pooling_2d",
               .doc = std::string("Maximum") + kDocGlobal,
               .inputs = {{"source"}},
               .attrs = {layout_attr()},
               .infer = infer_global_pooling_2d,
               .family = "pooling",
               .expand = expand_global_max_pooling_2d});
}

}  // namespace mg::ops
