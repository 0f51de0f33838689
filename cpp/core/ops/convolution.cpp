// Convolution family.
//
// Primitives, in one canonical layout: channels first, any number k >= 1 of spatial dims, so
// one kernel per backend serves 1-D, 2-D and 3-D:
//   convolution(source (N, C, *S), weights (O, C/groups, *K))                -> (N, O, *Y)
//   convolution_data_gradient(incoming_gradient (N, O, *Y), weights, like)   -> (N, C, *S)
//   convolution_weights_gradient(incoming_gradient, source, like)            -> (O, C/groups, *K)
// The two gradients are the adjoints of the convolution in its source and in its weights, and
// their gradient rules are written with the three primitives, so every order of derivative works:
//   y = conv(x, w):            dx = data_grad(dy, w),  dw = weights_grad(dy, x)
//   z = data_grad(d, w):       dd = conv(G, w),        dw = weights_grad(d, G)
//   z = weights_grad(d, x):    dd = conv(x, H),        dx = data_grad(d, H)
// Padding styles ('explicit', 'valid', 'same' = TensorFlow SAME with the extra padding at the end,
// 'same_lower' = ONNX SAME_LOWER) resolve against the source's spatial dims, which all three ops
// know (conv: source; data gradient: like / its attributes; weights gradient: source). A style
// whose dims are unknown when the graph is built is resolved at specialisation, when inference
// runs again with concrete shapes; the resolved padding is stored in the node's `padding`.
//
// MPSGraph-named front ends (convolution_2d, convolution_3d, depthwise_convolution_2d,
// convolution_transpose_2d, convolution_2d_data_gradient, convolution_2d_weights_gradient) are
// composites: they check shapes in the user's layout (so errors quote the user's shapes),
// transpose to the canonical layout, call a primitive and transpose back.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/ops/common.h"
#include "core/ops/convolution_attrs.h"

namespace mg::ops {

namespace {

using Ints = std::vector<int64_t>;

std::string ints_str(const Ints& v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + (v.size() == 1 ? ",)" : ")");
}

const int64_t kDimLimit = int64_t(1) << 40;  // keeps every geometry product far from overflow

struct ConvAttrs {
  int64_t k = 0;    // spatial rank
  Ints strides;     // k
  Ints dilations;   // k
  Ints padding;     // 2k: (before, after) per spatial dim (explicit style)
  int64_t groups = 1;
  std::string style;
};

// 1 value: every dim; k values: one per dim. Empty: `dflt` everywhere.
Ints per_dim(const InferCtx& c, const std::string& name, int64_t k, int64_t dflt, int64_t min) {
  const Ints& v = c.ints(name);
  Ints r;
  if (v.empty()) r.assign(size_t(k), dflt);
  else if (v.size() == 1) r.assign(size_t(k), v[0]);
  else if (int64_t(v.size()) == k) r = v;
  else
    c.fail(ErrorKind::Value, name + " " + ints_str(v) + " must have 1 or " + std::to_string(k) +
                                 " values (one per spatial dim)");
  for (auto x : r)
    if (x < min || x > kDimLimit)
      c.fail(ErrorKind::Value, name + " " + ints_str(v) + " must be " + (min > 0 ? "positive" : "non-negative"));
  return r;
}

// Reads and normalises strides, dilation_rates, padding, padding_style and (when present)
// groups, storing the normalised lists back into the node.
ConvAttrs read_attrs(InferCtx& c, int64_t k) {
  ConvAttrs a;
  a.k = k;
  a.strides = per_dim(c, "strides", k, 1, 1);
  a.dilations = per_dim(c, "dilation_rates", k, 1, 1);
  const Ints& p = c.ints("padding");
  if (p.empty()) a.padding.assign(size_t(2 * k), 0);
  else if (int64_t(p.size()) == 2 * k) a.padding = p;
  else if (p.size() == 1) a.padding.assign(size_t(2 * k), p[0]);
  else if (int64_t(p.size()) == k)
    for (auto x : p) a.padding.insert(a.padding.end(), {x, x});
  else
    c.fail(ErrorKind::Value, "padding " + ints_str(p) + " must have " + std::to_string(2 * k) +
                                 " values (before and after each spatial dim), " + std::to_string(k) +
                                 " (symmetric per dim) or 1");
  for (auto x : a.padding)
    if (x < 0 || x > kDimLimit) c.fail(ErrorKind::Value, "padding " + ints_str(p) + " must be non-negative");
  a.style = c.s("padding_style");
  if (a.style != "explicit" && a.style != "valid" && a.style != "same" && a.style != "same_lower")
    c.fail(ErrorKind::Value, "padding_style must be 'explicit', 'valid', 'same' or 'same_lower', not '" + a.style + "'");
  if (c.has("groups")) {
    a.groups = c.i("groups");
    if (a.groups < 1 || a.groups > kDimLimit) c.fail(ErrorKind::Value, "groups must be positive, got " + std::to_string(a.groups));
  }
  c.attrs["strides"] = a.strides;
  c.attrs["dilation_rates"] = a.dilations;
  c.attrs["padding"] = a.padding;
  return a;
}

int64_t eff_kernel(const ConvAttrs& a, size_t i, int64_t kk) { return kk < 0 ? -1 : a.dilations[i] * (kk - 1) + 1; }
int64_t ceil_div(int64_t x, int64_t y) { return (x + y - 1) / y; }

// (before, after) padding of spatial dim i for a source extent `in` and kernel extent `kk`;
// -1 where the style needs a dim that is unknown.
std::pair<int64_t, int64_t> resolve_pad(const ConvAttrs& a, size_t i, int64_t in, int64_t kk) {
  if (a.style == "explicit") return {a.padding[2 * i], a.padding[2 * i + 1]};
  if (a.style == "valid") return {0, 0};
  if (in < 0 || kk < 0) return {-1, -1};
  int64_t out = ceil_div(in, a.strides[i]);
  int64_t total = std::max<int64_t>((out - 1) * a.strides[i] + eff_kernel(a, i, kk) - in, 0);
  int64_t small = total / 2;
  return a.style == "same" ? std::make_pair(small, total - small) : std::make_pair(total - small, small);
}

// Output extent of spatial dim i (-1 if unknown); fails when the dilated kernel does not fit.
int64_t out_extent(const InferCtx& c, const ConvAttrs& a, size_t i, int64_t in, int64_t kk, const std::string& src_desc) {
  if (kk == 0) c.fail(ErrorKind::Value, "the weights' kernel has a zero-size spatial dim");
  if (a.style == "same" || a.style == "same_lower") return in < 0 ? -1 : ceil_div(in, a.strides[i]);
  if (in < 0 || kk < 0) return -1;
  auto [pb, pa] = resolve_pad(a, i, in, kk);
  int64_t span = in + pb + pa, eff = eff_kernel(a, i, kk);
  if (span < eff)
    c.fail(ErrorKind::Value, "kernel larger than padded input along spatial dim " + std::to_string(i) + ": the kernel of " +
                                 std::to_string(kk) + (a.dilations[i] > 1 ? " (dilated to " + std::to_string(eff) + ")" : "") +
                                 " does not fit in the " + std::to_string(span) + " padded positions of source " + src_desc);
  return (span - eff) / a.strides[i] + 1;
}

// Stores the padding resolved for concrete dims (styles other than explicit) into the node.
void store_padding(InferCtx& c, const ConvAttrs& a, const Shape& src, const Shape& w) {
  if (a.style == "explicit") return;
  Ints p;
  for (size_t i = 0; i < size_t(a.k); ++i) {
    auto [pb, pa] = resolve_pad(a, i, src[2 + i], w[2 + i]);
    if (pb < 0) return;
    p.insert(p.end(), {pb, pa});
  }
  c.attrs["padding"] = p;
}

void check_float_pair(InferCtx& c) {
  require_class(c, 0, kFloat);
  require_class(c, 1, kFloat);
  c.same_dtype(0, 1);
}

int64_t known_or(int64_t a, int64_t b) { return a >= 0 ? a : b; }

// Channel/group checks on canonical dims; the descriptions quote the user's shapes.
void check_channels(const InferCtx& c, int64_t groups, int64_t C, int64_t O, int64_t I, const std::string& src_desc,
                    const std::string& w_desc) {
  if (C >= 0 && C % groups != 0)
    c.fail(ErrorKind::Value, "groups=" + std::to_string(groups) + " does not divide the " + std::to_string(C) +
                                 " channels of source " + src_desc);
  if (O >= 0 && O % groups != 0)
    c.fail(ErrorKind::Value, "groups=" + std::to_string(groups) + " does not divide the " + std::to_string(O) +
                                 " output channels of weights " + w_desc);
  if (C >= 0 && I >= 0 && I * groups != C)
    c.fail(ErrorKind::Value, "channels differ: source " + src_desc + " has " + std::to_string(C) +
                                 " channels but weights " + w_desc + " expect " + std::to_string(I * groups) +
                                 (groups > 1 ? " (" + std::to_string(I) + " per group x groups=" + std::to_string(groups) + ")"
                                             : ""));
}

// Canonical forward output shape (N, O, *Y) of source xs (N, C, *S) and weights ws (O, I, *K).
Shape forward_shape(const InferCtx& c, const ConvAttrs& a, const Shape& xs, const Shape& ws, const std::string& src_desc,
                    const std::string& w_desc) {
  check_channels(c, a.groups, xs[1], ws[0], ws[1], src_desc, w_desc);
  Shape out{xs[0], ws[0]};
  for (size_t i = 0; i < size_t(a.k); ++i) out.push_back(out_extent(c, a, i, xs[2 + i], ws[2 + i], src_desc));
  return out;
}

// Source extent along dim i that a transposed convolution produces from `in` positions: the
// smallest one whose convolution gives `in` positions, plus output_padding.
int64_t transposed_extent(const InferCtx& c, const ConvAttrs& a, size_t i, int64_t in, int64_t kk, int64_t out_pad) {
  if (in < 0 || kk < 0) return -1;
  int64_t s = a.strides[i];
  int64_t base;
  if (a.style == "same" || a.style == "same_lower") base = (in - 1) * s + 1;
  else if (a.style == "valid") base = (in - 1) * s + eff_kernel(a, i, kk);
  else base = (in - 1) * s + eff_kernel(a, i, kk) - a.padding[2 * i] - a.padding[2 * i + 1];
  int64_t r = base + out_pad;
  if (r < 0)
    c.fail(ErrorKind::Value, "the padding leaves no output along spatial dim " + std::to_string(i) + " (extent " +
                                 std::to_string(r) + ")");
  return r;
}

// Checks that a convolution of a source with spatial dims `src_sp` gives `grad_sp`.
void check_consistent(const InferCtx& c, const ConvAttrs& a, const Shape& src_sp, const Shape& k_sp, const Shape& grad_sp,
                      const std::string& grad_desc, const std::string& what) {
  Shape want;
  bool mismatch = false;
  for (size_t i = 0; i < size_t(a.k); ++i) {
    int64_t o = out_extent(c, a, i, src_sp[i], k_sp[i], "with spatial dims " + shape_str(src_sp));
    want.push_back(o);
    if (o >= 0 && grad_sp[i] >= 0 && o != grad_sp[i]) mismatch = true;
  }
  if (mismatch)
    c.fail(ErrorKind::Value, "incoming gradient " + grad_desc + " does not match " + what + ": a convolution of spatial dims " +
                                 shape_str(src_sp) + " gives " + shape_str(want));
}

Shape tail(const Shape& s, size_t from) { return Shape(s.begin() + long(from), s.end()); }

void check_rank(const InferCtx& c, const TensorType& t, size_t rank, const std::string& what) {
  if (t.shape.size() != rank)
    c.fail(ErrorKind::Value, what + " " + type_str(t) + " must have rank " + std::to_string(rank) +
                                 " (like the incoming gradient/source)");
}

// ---------------- primitive inference ----------------

std::vector<TensorType> infer_convolution(InferCtx& c) {
  check_float_pair(c);
  const TensorType &x = c.in[0], &w = c.in[1];
  if (x.shape.size() < 3)
    c.fail(ErrorKind::Value, "source " + type_str(x) + " must have rank >= 3: (N, C, spatial...)");
  check_rank(c, w, x.shape.size(), "weights");
  ConvAttrs a = read_attrs(c, int64_t(x.shape.size()) - 2);
  Shape out = forward_shape(c, a, x.shape, w.shape, shape_str(x.shape), shape_str(w.shape));
  store_padding(c, a, x.shape, w.shape);
  return {{x.dtype, out}};
}

std::vector<TensorType> infer_convolution_data_gradient(InferCtx& c) {
  check_float_pair(c);
  const TensorType &d = c.in[0], &w = c.in[1], &like = c.in[2];
  if (d.shape.size() < 3)
    c.fail(ErrorKind::Value, "incoming gradient " + type_str(d) + " must have rank >= 3: (N, O, spatial...)");
  const size_t r = d.shape.size();
  check_rank(c, w, r, "weights");
  ConvAttrs a = read_attrs(c, int64_t(r) - 2);
  const int64_t O = known_or(d.shape[1], w.shape[0]);
  if (d.shape[1] >= 0 && w.shape[0] >= 0 && d.shape[1] != w.shape[0])
    c.fail(ErrorKind::Value, "incoming gradient " + shape_str(d.shape) + " has " + std::to_string(d.shape[1]) +
                                 " channels but weights " + shape_str(w.shape) + " have " + std::to_string(w.shape[0]) +
                                 " output channels");
  if (O >= 0 && O % a.groups != 0)
    c.fail(ErrorKind::Value, "groups=" + std::to_string(a.groups) + " does not divide the " + std::to_string(O) +
                                 " output channels of weights " + shape_str(w.shape));
  const int64_t C = w.shape[1] < 0 ? -1 : w.shape[1] * a.groups;
  const Shape k_sp = tail(w.shape, 2), d_sp = tail(d.shape, 2);
  Shape src_sp;
  std::string what;
  if (c.has("source_spatial_shape")) {
    Ints s = c.ints("source_spatial_shape");
    if (int64_t(s.size()) != a.k)
      c.fail(ErrorKind::Value, "source_spatial_shape " + ints_str(s) + " must have " + std::to_string(a.k) + " dims");
    for (auto v : s)
      if (v < 0 || v > kDimLimit) c.fail(ErrorKind::Value, "source_spatial_shape " + ints_str(s) + " must be known and non-negative");
    src_sp = s;
    what = "source_spatial_shape " + ints_str(s);
  } else if (c.has("output_padding")) {
    Ints op = per_dim(c, "output_padding", a.k, 0, 0);
    c.attrs["output_padding"] = op;
    for (size_t i = 0; i < size_t(a.k); ++i) src_sp.push_back(transposed_extent(c, a, i, d_sp[i], k_sp[i], op[i]));
    what = "output_padding " + ints_str(op) + " (the padding, or output_padding, is too large)";
  } else {
    check_rank(c, like, r, "like");
    if (like.shape[0] >= 0 && d.shape[0] >= 0 && like.shape[0] != d.shape[0])
      c.fail(ErrorKind::Value, "like " + shape_str(like.shape) + " and incoming gradient " + shape_str(d.shape) +
                                   " differ in batch size");
    if (like.shape[1] >= 0 && C >= 0 && like.shape[1] != C)
      c.fail(ErrorKind::Value, "channels differ: like " + shape_str(like.shape) + " has " + std::to_string(like.shape[1]) +
                                   " channels but weights " + shape_str(w.shape) + " expect " + std::to_string(C));
    src_sp = tail(like.shape, 2);
    what = "like " + shape_str(like.shape);
  }
  check_consistent(c, a, src_sp, k_sp, d_sp, shape_str(d.shape), what);
  Shape src{d.shape[0], C};
  src.insert(src.end(), src_sp.begin(), src_sp.end());
  store_padding(c, a, src, w.shape);
  return {{d.dtype, src}};
}

std::vector<TensorType> infer_convolution_weights_gradient(InferCtx& c) {
  check_float_pair(c);
  const TensorType &d = c.in[0], &x = c.in[1], &like = c.in[2];
  if (d.shape.size() < 3)
    c.fail(ErrorKind::Value, "incoming gradient " + type_str(d) + " must have rank >= 3: (N, O, spatial...)");
  const size_t r = d.shape.size();
  check_rank(c, x, r, "source");
  ConvAttrs a = read_attrs(c, int64_t(r) - 2);
  if (d.shape[0] >= 0 && x.shape[0] >= 0 && d.shape[0] != x.shape[0])
    c.fail(ErrorKind::Value, "incoming gradient " + shape_str(d.shape) + " and source " + shape_str(x.shape) +
                                 " differ in batch size");
  const int64_t C = x.shape[1], O = d.shape[1];
  if (C >= 0 && C % a.groups != 0)
    c.fail(ErrorKind::Value, "groups=" + std::to_string(a.groups) + " does not divide the " + std::to_string(C) +
                                 " channels of source " + shape_str(x.shape));
  if (O >= 0 && O % a.groups != 0)
    c.fail(ErrorKind::Value, "groups=" + std::to_string(a.groups) + " does not divide the " + std::to_string(O) +
                                 " channels of incoming gradient " + shape_str(d.shape));
  const int64_t I = C < 0 ? -1 : C / a.groups;
  Shape k_sp;
  int64_t O_like = -1;
  if (c.has("kernel_spatial_shape")) {
    Ints s = c.ints("kernel_spatial_shape");
    if (int64_t(s.size()) != a.k)
      c.fail(ErrorKind::Value, "kernel_spatial_shape " + ints_str(s) + " must have " + std::to_string(a.k) + " dims");
    for (auto v : s)
      if (v < 1 || v > kDimLimit) c.fail(ErrorKind::Value, "kernel_spatial_shape " + ints_str(s) + " must be known and positive");
    k_sp = s;
  } else {
    check_rank(c, like, r, "like");
    if (like.shape[0] >= 0 && O >= 0 && like.shape[0] != O)
      c.fail(ErrorKind::Value, "like " + shape_str(like.shape) + " has " + std::to_string(like.shape[0]) +
                                   " output channels but the incoming gradient " + shape_str(d.shape) + " has " +
                                   std::to_string(O));
    if (like.shape[1] >= 0 && I >= 0 && like.shape[1] != I)
      c.fail(ErrorKind::Value, "channels differ: source " + shape_str(x.shape) + " has " + std::to_string(C) +
                                   " channels but like " + shape_str(like.shape) + " expects " +
                                   std::to_string(like.shape[1] * a.groups));
    k_sp = tail(like.shape, 2);
    O_like = like.shape[0];
  }
  check_consistent(c, a, tail(x.shape, 2), k_sp, tail(d.shape, 2), shape_str(d.shape), "source " + shape_str(x.shape));
  Shape wshape{known_or(O, O_like), I};
  wshape.insert(wshape.end(), k_sp.begin(), k_sp.end());
  store_padding(c, a, x.shape, wshape);
  return {{d.dtype, wshape}};
}

// ---- typed attributes of the primitives (convolution_attrs.h) ----

PaddingStyle padding_style(const std::string& s) {
  if (s == "valid") return PaddingStyle::Valid;
  if (s == "same") return PaddingStyle::Same;
  if (s == "same_lower") return PaddingStyle::SameLower;
  if (s == "explicit") return PaddingStyle::Explicit;
  throw std::logic_error("internal error: unknown padding_style '" + s + "'");  // inference checked it
}

std::optional<Ints> optional_ints(const Attrs& a, const char* name) {
  if (!has_attr(a, name)) return std::nullopt;
  return get_attr<Ints>(a, name);
}

ConvolutionAttrs decode_convolution_attrs(const Attrs& a) {
  ConvolutionAttrs r;
  r.strides = get_attr<Ints>(a, "strides");
  r.dilation_rates = get_attr<Ints>(a, "dilation_rates");
  r.padding = get_attr<Ints>(a, "padding");
  r.padding_style = padding_style(get_attr<std::string>(a, "padding_style"));
  r.groups = get_attr<int64_t>(a, "groups");
  r.output_padding = optional_ints(a, "output_padding");
  r.source_spatial_shape = optional_ints(a, "source_spatial_shape");
  r.kernel_spatial_shape = optional_ints(a, "kernel_spatial_shape");
  return r;
}

// The attributes the three primitives share (gradient rules pass them on).
Attrs geometry(const Attrs& a) {
  Attrs r;
  for (const char* k : {"strides", "dilation_rates", "padding", "padding_style", "groups"}) {
    auto it = a.find(k);
    if (it != a.end()) r[k] = it->second;
  }
  return r;
}

ValueRef conv(Graph& g, ValueRef x, ValueRef w, const Attrs& a) { return call(g, "convolution", {x, w}, geometry(a)); }
ValueRef data_grad(Graph& g, ValueRef d, ValueRef w, ValueRef like, const Attrs& a) {
  return call(g, "convolution_data_gradient", {d, w, like}, geometry(a));
}
ValueRef weights_grad(Graph& g, ValueRef d, ValueRef x, ValueRef like, const Attrs& a) {
  return call(g, "convolution_weights_gradient", {d, x, like}, geometry(a));
}

std::vector<AttrSpec> geometry_attrs(bool with_groups) {
  std::vector<AttrSpec> r = {
      attr("strides", AttrKind::Ints, Ints{}, "per spatial dim (1 value: all dims); default 1"),
      attr("dilation_rates", AttrKind::Ints, Ints{}, "per spatial dim (1 value: all dims); default 1"),
      attr("padding", AttrKind::Ints, Ints{},
           "explicit padding, (before, after) for each spatial dim in order; k values: symmetric per dim; "
           "1 value: everywhere. Used by padding_style 'explicit' only"),
      attr("padding_style", AttrKind::String, std::string("explicit"),
           "'explicit', 'valid' (none), 'same' (TensorFlow SAME: output = ceil(input / stride), odd padding "
           "at the end) or 'same_lower' (ONNX SAME_LOWER: odd padding at the start)"),
  };
  if (with_groups) r.push_back(attr("groups", AttrKind::Int, int64_t(1), "channel groups; both channel counts divide by it"));
  return r;
}

// ---------------- front ends (composites) ----------------

// Permutation taking a channels-last tensor (N, *S, C) to channels first (N, C, *S); inverse.
Ints to_channels_first(size_t r) {
  Ints p{0, int64_t(r) - 1};
  for (size_t i = 1; i + 1 < r; ++i) p.push_back(int64_t(i));
  return p;
}
Ints to_channels_last(size_t r) {
  Ints p{0};
  for (size_t i = 2; i < r; ++i) p.push_back(int64_t(i));
  p.push_back(1);
  return p;
}
// Weights (*K, I, O) -> (O, I, *K) and back.
Ints spatial_first_to_oi(size_t r) {
  Ints p{int64_t(r) - 1, int64_t(r) - 2};
  for (size_t i = 0; i + 2 < r; ++i) p.push_back(int64_t(i));
  return p;
}
Ints oi_to_spatial_first(size_t r) {
  Ints p;
  for (size_t i = 2; i < r; ++i) p.push_back(int64_t(i));
  p.push_back(1);
  p.push_back(0);
  return p;
}
Shape permuted(const Shape& s, const Ints& p) {
  Shape r;
  for (auto i : p) r.push_back(s[size_t(i)]);
  return r;
}
ValueRef transpose(Graph& g, ValueRef x, const Ints& p) { return call(g, "transpose", {x}, {{"permutation", p}}); }

// Layout names for k spatial dims: channels-last / first data, spatial-first / OI-first weights.
struct LayoutNames {
  std::string data_last, data_first, w_spatial, w_oi;
};
LayoutNames layout_names(int64_t k) {
  if (k == 3) return {"NDHWC", "NCDHW", "DHWIO", "OIDHW"};
  return {"NHWC", "NCHW", "HWIO", "OIHW"};
}

struct Layouts {
  bool data_last = true;   // NHWC-like
  bool w_spatial = true;   // HWIO-like
};

Layouts read_layouts(const InferCtx& c, int64_t k, bool has_weights_layout = true) {
  LayoutNames n = layout_names(k);
  Layouts l;
  const std::string& d = c.s("data_layout");
  if (d == n.data_last) l.data_last = true;
  else if (d == n.data_first) l.data_last = false;
  else c.fail(ErrorKind::Value, "data_layout must be '" + n.data_last + "' or '" + n.data_first + "', not '" + d + "'");
  if (has_weights_layout) {
    const std::string& w = c.s("weights_layout");
    if (w == n.w_spatial) l.w_spatial = true;
    else if (w == n.w_oi) l.w_spatial = false;
    else c.fail(ErrorKind::Value, "weights_layout must be '" + n.w_spatial + "' or '" + n.w_oi + "', not '" + w + "'");
  }
  return l;
}

Layouts layouts_of(const Attrs& a, int64_t k, bool has_weights_layout = true) {
  LayoutNames n = layout_names(k);
  Layouts l;
  l.data_last = std::get<std::string>(a.at("data_layout")) == n.data_last;
  if (has_weights_layout) l.w_spatial = std::get<std::string>(a.at("weights_layout")) == n.w_spatial;
  return l;
}

ValueRef data_in(Graph& g, ValueRef x, const Layouts& l, size_t r) { return l.data_last ? transpose(g, x, to_channels_first(r)) : x; }
ValueRef data_out(Graph& g, ValueRef x, const Layouts& l, size_t r) { return l.data_last ? transpose(g, x, to_channels_last(r)) : x; }
ValueRef weights_in(Graph& g, ValueRef w, const Layouts& l, size_t r) { return l.w_spatial ? transpose(g, w, spatial_first_to_oi(r)) : w; }
ValueRef weights_out(Graph& g, ValueRef w, const Layouts& l, size_t r) { return l.w_spatial ? transpose(g, w, oi_to_spatial_first(r)) : w; }
Shape data_canon(const Shape& s, const Layouts& l) { return l.data_last ? permuted(s, to_channels_first(s.size())) : s; }
Shape data_user(const Shape& s, const Layouts& l) { return l.data_last ? permuted(s, to_channels_last(s.size())) : s; }
Shape weights_canon(const Shape& s, const Layouts& l) { return l.w_spatial ? permuted(s, spatial_first_to_oi(s.size())) : s; }
Shape weights_user(const Shape& s, const Layouts& l) { return l.w_spatial ? permuted(s, oi_to_spatial_first(s.size())) : s; }

void check_front_rank(const InferCtx& c, size_t input, size_t rank, const std::string& what, const std::string& layout) {
  const TensorType& t = c.in[input];
  if (t.shape.size() != rank)
    c.fail(ErrorKind::Value, what + " " + type_str(t) + " must have rank " + std::to_string(rank) + " (" + layout + ")");
}

std::vector<AttrSpec> front_attrs(int64_t k, bool with_groups, bool with_weights_layout) {
  LayoutNames n = layout_names(k);
  Ints ones(size_t(k), 1), zeros(size_t(2 * k), 0);
  std::string order = k == 3 ? "(front, back, top, bottom, left, right)" : "(top, bottom, left, right)";
  std::vector<AttrSpec> r = {
      attr("strides", AttrKind::Ints, ones, k == 3 ? "(depth, height, width) strides" : "(height, width) strides"),
      attr("dilation_rates", AttrKind::Ints, ones, "dilation per spatial dim, same order as strides"),
      attr("padding_style", AttrKind::String, std::string("explicit"),
           "'explicit' (use padding), 'valid' (none), 'same' (TensorFlow SAME: output = ceil(input / stride), odd "
           "padding at the end) or 'same_lower' (ONNX SAME_LOWER)"),
      attr("padding", AttrKind::Ints, zeros, "explicit padding " + order + "; used by padding_style 'explicit'"),
  };
  if (with_groups) r.push_back(attr("groups", AttrKind::Int, int64_t(1), "channel groups"));
  r.push_back(attr("data_layout", AttrKind::String, n.data_last, "'" + n.data_last + "' or '" + n.data_first + "'"));
  if (with_weights_layout)
    r.push_back(attr("weights_layout", AttrKind::String, n.w_spatial, "'" + n.w_spatial + "' or '" + n.w_oi + "'"));
  return r;
}

// ---- convolution_2d / convolution_3d ----

std::string forward_front_doc(int64_t k) {
  LayoutNames n = layout_names(k);
  return "MPSGraph's convolution" + std::to_string(k) + "D: cross-correlation of source (" + n.data_last + " or " +
         n.data_first + ") with weights (" + n.w_spatial + " or " + n.w_oi +
         "; I = source channels / groups), with strides, dilation, padding and channel groups. Decomposes "
         "into transposes and the channels-first `convolution` primitive.";
}

std::vector<TensorType> infer_forward_front(InferCtx& c, int64_t k) {
  const LayoutNames n = layout_names(k);
  const size_t r = size_t(k) + 2;
  check_float_pair(c);
  Layouts l = read_layouts(c, k);
  check_front_rank(c, 0, r, "source", l.data_last ? n.data_last : n.data_first);
  check_front_rank(c, 1, r, "weights", l.w_spatial ? n.w_spatial : n.w_oi);
  ConvAttrs a = read_attrs(c, k);
  Shape out = forward_shape(c, a, data_canon(c.in[0].shape, l), weights_canon(c.in[1].shape, l),
                            shape_str(c.in[0].shape), shape_str(c.in[1].shape));
  return std::vector<TensorType>{{c.in[0].dtype, data_user(out, l)}};
}
std::vector<TensorType> infer_convolution_2d(InferCtx& c) { return infer_forward_front(c, 2); }
std::vector<TensorType> infer_convolution_3d(InferCtx& c) { return infer_forward_front(c, 3); }

std::vector<ValueRef> expand_forward_front(Graph& g, const std::vector<ValueRef>& in, const Attrs& a, int64_t k) {
  const size_t r = size_t(k) + 2;
  Layouts l = layouts_of(a, k);
  ValueRef y = conv(g, data_in(g, in[0], l, r), weights_in(g, in[1], l, r), a);
  return std::vector<ValueRef>{data_out(g, y, l, r)};
}
std::vector<ValueRef> expand_convolution_2d(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  return expand_forward_front(g, in, a, 2);
}
std::vector<ValueRef> expand_convolution_3d(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  return expand_forward_front(g, in, a, 3);
}

// ---- convolution_transpose_2d / convolution_2d_data_gradient ----

// The forward convolution's source spatial dims, as given by output_shape (full, in data_layout,
// or spatial only); checks its N and C against what is known.
Shape output_shape_spatial(const InferCtx& c, const Layouts& l, int64_t k, int64_t N, int64_t C) {
  const Ints& os = c.ints("output_shape");
  Shape sp;
  if (int64_t(os.size()) == k + 2) {
    Shape canon = data_canon(os, l);
    if (canon[0] >= 0 && N >= 0 && canon[0] != N)
      c.fail(ErrorKind::Value, "output_shape " + shape_str(os) + " has batch size " + std::to_string(canon[0]) + ", not " +
                                   std::to_string(N));
    if (canon[1] >= 0 && C >= 0 && canon[1] != C)
      c.fail(ErrorKind::Value, "output_shape " + shape_str(os) + " has " + std::to_string(canon[1]) +
                                   " channels but the weights give " + std::to_string(C));
    sp = tail(canon, 2);
  } else if (int64_t(os.size()) == k) {
    sp = os;
  } else {
    c.fail(ErrorKind::Value, "output_shape " + shape_str(os) + " must have " + std::to_string(k + 2) +
                                 " dims (in data_layout) or " + std::to_string(k) + " (spatial only)");
  }
  for (auto v : sp)
    if (v < 0 || v > kDimLimit)
      c.fail(ErrorKind::Value, "output_shape " + shape_str(os) + " needs known, non-negative spatial dims");
  return sp;
}

// convolution_transpose_2d and convolution_2d_data_gradient: data gradient of a forward
// convolution whose weights are given (O = this op's input channels, I = output channels / groups).
// convolution_2d_data_gradient requires output_shape (the forward source's shape).
std::vector<AttrSpec> transpose_front_attrs(bool shape_required) {
  std::vector<AttrSpec> attrs = front_attrs(2, true, true);
  attrs.insert(attrs.begin(), shape_required ? attr("output_shape", AttrKind::Shape, AttrNone{},
                                                    "the result's shape (in data_layout), i.e. the forward source's")
                                             : optional_attr("output_shape", AttrKind::Shape,
                                                             "the result's shape (in data_layout, or spatial (H, W)); "
                                                             "default: the smallest consistent one (input * stride for "
                                                             "'same')"));
  return attrs;
}

std::vector<TensorType> infer_transpose_front(InferCtx& c, bool shape_required) {
  const int64_t k = 2;
  const size_t r = 4;
  const LayoutNames n = layout_names(k);
  const std::string src = shape_required ? "incoming gradient" : "source";
  check_float_pair(c);
  Layouts l = read_layouts(c, k);
  check_front_rank(c, 0, r, src, l.data_last ? n.data_last : n.data_first);
  check_front_rank(c, 1, r, "weights", l.w_spatial ? n.w_spatial : n.w_oi);
  ConvAttrs a = read_attrs(c, k);
  const Shape xs = data_canon(c.in[0].shape, l), ws = weights_canon(c.in[1].shape, l);
  const std::string xd = shape_str(c.in[0].shape), wd = shape_str(c.in[1].shape);
  if (xs[1] >= 0 && ws[0] >= 0 && xs[1] != ws[0])
    c.fail(ErrorKind::Value, "channels differ: " + src + " " + xd + " has " + std::to_string(xs[1]) +
                                 " channels but weights " + wd + " have " + std::to_string(ws[0]) +
                                 " (their O, the forward convolution's output channels)");
  const int64_t O = known_or(xs[1], ws[0]);
  if (O >= 0 && O % a.groups != 0)
    c.fail(ErrorKind::Value, "groups=" + std::to_string(a.groups) + " does not divide the " + std::to_string(O) +
                                 " channels of " + src + " " + xd);
  const int64_t C = ws[1] < 0 ? -1 : ws[1] * a.groups;
  Shape sp;
  if (c.has("output_shape")) {
    sp = output_shape_spatial(c, l, k, xs[0], C);
    c.attrs["output_shape"] = sp;  // normalised to the spatial dims
    check_consistent(c, a, sp, tail(ws, 2), tail(xs, 2), xd, "output_shape " + shape_str(sp));
  } else {
    for (size_t i = 0; i < size_t(k); ++i) {
      int64_t op = (a.style == "same" || a.style == "same_lower") ? a.strides[i] - 1 : 0;
      sp.push_back(transposed_extent(c, a, i, xs[2 + i], ws[2 + i], op));
    }
  }
  Shape out{xs[0], C};
  out.insert(out.end(), sp.begin(), sp.end());
  return std::vector<TensorType>{{c.in[0].dtype, data_user(out, l)}};
}
std::vector<TensorType> infer_convolution_transpose_2d(InferCtx& c) { return infer_transpose_front(c, false); }
std::vector<TensorType> infer_convolution_2d_data_gradient(InferCtx& c) { return infer_transpose_front(c, true); }

std::vector<ValueRef> expand_transpose_front(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  const int64_t k = 2;
  const size_t r = 4;
  Layouts l = layouts_of(a, k);
  ValueRef xs = data_in(g, in[0], l, r);
  Attrs p = geometry(a);
  if (a.count("output_shape")) {
    p["source_spatial_shape"] = a.at("output_shape");
  } else {
    const std::string& style = std::get<std::string>(a.at("padding_style"));
    Ints op;
    for (auto s : std::get<Ints>(a.at("strides"))) op.push_back(style == "same" || style == "same_lower" ? s - 1 : 0);
    p["output_padding"] = op;
  }
  ValueRef z = call(g, "convolution_data_gradient", {xs, weights_in(g, in[1], l, r), xs /* like: unused */}, p);
  return std::vector<ValueRef>{data_out(g, z, l, r)};
}
std::vector<ValueRef> expand_convolution_transpose_2d(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  return expand_transpose_front(g, in, a);
}
std::vector<ValueRef> expand_convolution_2d_data_gradient(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  return expand_transpose_front(g, in, a);
}


// ---- convolution ----

std::vector<ValueRef> grad_convolution(GradCtx& c) {
  const Attrs& a = c.node.attrs;
  ValueRef dy = c.dy[0];
  return std::vector<ValueRef>{data_grad(c.g, dy, c.x(1), c.x(0), a), weights_grad(c.g, dy, c.x(0), c.x(1), a)};
}

// ---- convolution_data_gradient ----

std::vector<ValueRef> grad_convolution_data_gradient(GradCtx& c) {
  const Attrs& a = c.node.attrs;
  ValueRef G = c.dy[0];
  return std::vector<ValueRef>{conv(c.g, G, c.x(1), a), weights_grad(c.g, c.x(0), G, c.x(1), a), ValueRef{}};
}

// ---- convolution_weights_gradient ----

std::vector<ValueRef> grad_convolution_weights_gradient(GradCtx& c) {
  const Attrs& a = c.node.attrs;
  ValueRef H = c.dy[0];
  return std::vector<ValueRef>{conv(c.g, c.x(1), H, a), data_grad(c.g, c.x(0), H, c.x(1), a), ValueRef{}};
}

// ---- depthwise_convolution_2d ----

std::vector<TensorType> infer_depthwise_convolution_2d(InferCtx& c) {
  check_float_pair(c);
  Layouts l = read_layouts(c, 2);
  check_front_rank(c, 0, 4, "source", l.data_last ? "NHWC" : "NCHW");
  check_front_rank(c, 1, 4, "weights", l.w_spatial ? "HWIO" : "OIHW");
  ConvAttrs a = read_attrs(c, 2);
  const Shape xs = data_canon(c.in[0].shape, l), &w = c.in[1].shape;
  // (C, M, kh, kw)
  Shape cm = l.w_spatial ? Shape{w[2], w[3], w[0], w[1]} : Shape{w[1], w[0], w[2], w[3]};
  if (xs[1] >= 0 && cm[0] >= 0 && xs[1] != cm[0])
    c.fail(ErrorKind::Value, "channels differ: source " + shape_str(c.in[0].shape) + " has " + std::to_string(xs[1]) +
                                 " channels but depthwise weights " + shape_str(w) + " have " + std::to_string(cm[0]) +
                                 " (weights_layout " + c.s("weights_layout") + ": I = channels, O = multiplier)");
  const int64_t C = known_or(xs[1], cm[0]);
  if (C < 0)
    c.fail(ErrorKind::Value, "needs the channel count known when the graph is built (source " +
                                 shape_str(c.in[0].shape) + ", weights " + shape_str(w) + ")");
  int unknown = (cm[1] < 0) + (cm[2] < 0) + (cm[3] < 0);
  if (unknown > 1)
    c.fail(ErrorKind::Value, "needs the weights' kernel dims and channel multiplier known when the graph is built "
                             "(at most one unknown), got " + shape_str(w));
  a.groups = std::max<int64_t>(C, 1);
  Shape ws{cm[1] < 0 ? -1 : C * cm[1], 1, cm[2], cm[3]};
  Shape out = forward_shape(c, a, xs, ws, shape_str(c.in[0].shape), shape_str(w));
  return std::vector<TensorType>{{c.in[0].dtype, data_user(out, l)}};
}

std::vector<ValueRef> expand_depthwise_convolution_2d(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  Layouts l = layouts_of(a, 2);
  const Shape& xs0 = g.type(in[0]).shape;
  const Shape& w = g.type(in[1]).shape;
  Shape cm = l.w_spatial ? Shape{w[2], w[3], w[0], w[1]} : Shape{w[1], w[0], w[2], w[3]};
  const int64_t C = known_or(data_canon(xs0, l)[1], cm[0]);
  ValueRef wc = transpose(g, in[1], l.w_spatial ? Ints{2, 3, 0, 1} : Ints{1, 0, 2, 3});  // (C, M, kh, kw)
  ValueRef wr = call(g, "reshape", {wc}, {{"shape", Ints{cm[1] < 0 ? -1 : C * cm[1], 1, cm[2], cm[3]}}});
  Attrs p = geometry(a);
  p["groups"] = std::max<int64_t>(C, 1);
  ValueRef y = conv(g, data_in(g, in[0], l, 4), wr, p);
  return std::vector<ValueRef>{data_out(g, y, l, 4)};
}

// ---- convolution_2d_weights_gradient ----

std::vector<TensorType> infer_convolution_2d_weights_gradient(InferCtx& c) {
  check_float_pair(c);
  Layouts l = read_layouts(c, 2);
  check_front_rank(c, 0, 4, "incoming gradient", l.data_last ? "NHWC" : "NCHW");
  check_front_rank(c, 1, 4, "source", l.data_last ? "NHWC" : "NCHW");
  ConvAttrs a = read_attrs(c, 2);
  const Ints& os = c.ints("output_shape");
  if (os.size() != 4)
    c.fail(ErrorKind::Value, "output_shape " + shape_str(os) + " must be the 4-d weights shape (" + c.s("weights_layout") + ")");
  const Shape ds = data_canon(c.in[0].shape, l), xs = data_canon(c.in[1].shape, l), ws = weights_canon(os, l);
  if (ws[2] < 1 || ws[3] < 1)
    c.fail(ErrorKind::Value, "output_shape " + shape_str(os) + " needs known, positive kernel dims");
  if (ds[0] >= 0 && xs[0] >= 0 && ds[0] != xs[0])
    c.fail(ErrorKind::Value, "incoming gradient " + shape_str(c.in[0].shape) + " and source " +
                                 shape_str(c.in[1].shape) + " differ in batch size");
  if (ds[1] >= 0 && ws[0] >= 0 && ds[1] != ws[0])
    c.fail(ErrorKind::Value, "incoming gradient " + shape_str(c.in[0].shape) + " has " + std::to_string(ds[1]) +
                                 " channels but output_shape " + shape_str(os) + " has O = " + std::to_string(ws[0]));
  check_channels(c, a.groups, xs[1], known_or(ds[1], ws[0]), ws[1], shape_str(c.in[1].shape), shape_str(os));
  check_consistent(c, a, tail(xs, 2), tail(ws, 2), tail(ds, 2), shape_str(c.in[0].shape),
                   "source " + shape_str(c.in[1].shape));
  Shape out{known_or(ds[1], ws[0]), xs[1] >= 0 ? xs[1] / a.groups : ws[1], ws[2], ws[3]};
  c.attrs["output_shape"] = weights_user(out, l);
  return std::vector<TensorType>{{c.in[0].dtype, weights_user(out, l)}};
}

std::vector<ValueRef> expand_convolution_2d_weights_gradient(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  Layouts l = layouts_of(a, 2);
  Shape ws = weights_canon(std::get<Ints>(a.at("output_shape")), l);
  ValueRef d = data_in(g, in[0], l, 4);
  Attrs p = geometry(a);
  p["kernel_spatial_shape"] = Ints{ws[2], ws[3]};
  ValueRef dw = call(g, "convolution_weights_gradient", {d, data_in(g, in[1], l, 4), d /* like: unused */}, p);
  return std::vector<ValueRef>{weights_out(g, dw, l, 4)};
}

}  // namespace

void register_convolution_ops() {
  auto prim_attrs = geometry_attrs(true);

  register_op({.name = "convolution",
               .doc = "N-d convolution (cross-correlation) in the canonical layout: source (N, C, *spatial), weights "
                      "(O, C/groups, *kernel) -> (N, O, *out), out = floor((in + pad_before + pad_after - dilation * "
                      "(kernel - 1) - 1) / stride) + 1. The primitive behind convolution_2d/3d, depthwise and "
                      "transposed convolutions.",
               .inputs = {{"source"}, {"weights"}},
               .attrs = prim_attrs,
               .decode = attr_decoder(decode_convolution_attrs),
               .infer = infer_convolution,
               .grad = grad_convolution,
               .family = "convolution",
               .per_sample = per_sample_first_input});

  auto dg_attrs = prim_attrs;
  dg_attrs.push_back(optional_attr("output_padding", AttrKind::Ints,
                                   "when given, `like` is ignored and the source's spatial dims are the smallest whose "
                                   "convolution gives the incoming gradient's, plus this (transposed convolution)"));
  dg_attrs.push_back(optional_attr("source_spatial_shape", AttrKind::Ints,
                                   "when given, `like` is ignored and these are the source's spatial dims"));
  register_op({.name = "convolution_data_gradient",
               .doc = "Gradient of convolution with respect to its source (the adjoint of the convolution in the "
                      "source; also the transposed convolution): incoming_gradient (N, O, *out), weights (O, C/groups, "
                      "*kernel) -> (N, C, *in). The source's spatial dims come from `like` (the forward source, or any "
                      "tensor of its shape), or from output_padding / source_spatial_shape.",
               .inputs = {{"incoming_gradient"}, {"weights"}, {"like", false, false, InputRole::ShapeOnly}},
               .attrs = dg_attrs,
               .decode = attr_decoder(decode_convolution_attrs),
               .infer = infer_convolution_data_gradient,
               .grad = grad_convolution_data_gradient,
               .family = "convolution"});

  auto wg_attrs = prim_attrs;
  wg_attrs.push_back(optional_attr("kernel_spatial_shape", AttrKind::Ints,
                                   "when given, `like` is ignored and these are the kernel's spatial dims"));
  register_op({.name = "convolution_weights_gradient",
               .doc = "Gradient of convolution with respect to its weights: incoming_gradient (N, O, *out), source "
                      "(N, C, *in) -> (O, C/groups, *kernel). The kernel's dims come from `like` (the forward weights, "
                      "or any tensor of their shape) or kernel_spatial_shape.",
               .inputs = {{"incoming_gradient"}, {"source"}, {"like", false, false, InputRole::ShapeOnly}},
               .attrs = wg_attrs,
               .decode = attr_decoder(decode_convolution_attrs),
               .infer = infer_convolution_weights_gradient,
               .grad = grad_convolution_weights_gradient,
               .family = "convolution"});

  register_op({.name = "convolution_2d",
               .doc = forward_front_doc(2),
               .inputs = {{"source"}, {"weights"}},
               .attrs = front_attrs(2, true, true),
               .infer = infer_convolution_2d,
               .family = "convolution",
               .expand = expand_convolution_2d});
  register_op({.name = "convolution_3d",
               .doc = forward_front_doc(3),
               .inputs = {{"source"}, {"weights"}},
               .attrs = front_attrs(3, true, true),
               .infer = infer_convolution_3d,
               .family = "convolution",
               .expand = expand_convolution_3d});

  // depthwise_convolution_2d: MPSGraph's weights layout, where 'O' is the channel multiplier M:
  // HWIO = (kh, kw, C, M) (TensorFlow's depthwise filter), OIHW = (M, C, kh, kw). Output channel
  // c * M + m is source channel c filtered by weights[..., c, m].
  register_op(
      {.name = "depthwise_convolution_2d",
       .doc = "MPSGraph's depthwiseConvolution2D (MobileNet style): each source channel c is convolved with its own "
              "M filters, giving C * M output channels (channel c * M + m). Weights in MPSGraph's depthwise layout, "
              "where O is the channel multiplier: 'HWIO' = (kh, kw, C, M) as TensorFlow, or 'OIHW' = (M, C, kh, kw). "
              "A grouped convolution with groups = C.",
       .inputs = {{"source"}, {"weights"}},
       .attrs = front_attrs(2, false, true),
       .infer = infer_depthwise_convolution_2d,
       .family = "convolution",
       .expand = expand_depthwise_convolution_2d});

  register_op({.name = "convolution_transpose_2d",
               .doc = "MPSGraph's convolutionTranspose2D (PyTorch conv_transpose2d): the data gradient of a forward "
                      "convolution whose source is this op's result. weights are the forward convolution's "
                      "(weights_layout 'HWIO' or 'OIHW', O = this op's input channels, I = output channels / groups; "
                      "OIHW is PyTorch's (C_in, C_out/groups, kh, kw)); strides, dilation_rates and padding describe "
                      "the forward convolution. output_shape picks among the result sizes that stride > 1 makes "
                      "possible (PyTorch's output_padding); without it the result is the smallest ((in - 1) * stride + "
                      "dilation * (k - 1) + 1 - padding), or in * stride for 'same'.",
               .inputs = {{"source"}, {"weights"}},
               .attrs = transpose_front_attrs(false),
               .infer = infer_convolution_transpose_2d,
               .family = "convolution",
               .expand = expand_convolution_transpose_2d});
  register_op({.name = "convolution_2d_data_gradient",
               .doc = "MPSGraph's convolution2DDataGradient: gradient of convolution_2d with respect to its source. "
                      "output_shape is the forward source's shape (in data_layout); the other attributes describe the "
                      "forward convolution.",
               .inputs = {{"incoming_gradient"}, {"weights"}},
               .attrs = transpose_front_attrs(true),
               .infer = infer_convolution_2d_data_gradient,
               .family = "convolution",
               .expand = expand_convolution_2d_data_gradient});

  register_op(
      {.name = "convolution_2d_weights_gradient",
       .doc = "MPSGraph's convolution2DWeightsGradient: gradient of convolution_2d with respect to its weights. "
              "output_shape is the weights' shape (in weights_layout); the other attributes describe the forward "
              "convolution.",
       .inputs = {{"incoming_gradient"}, {"source"}},
       .attrs = [] {
         auto a = front_attrs(2, true, true);
         a.insert(a.begin(), attr("output_shape", AttrKind::Shape, AttrNone{}, "the weights' shape (in weights_layout)"));
         return a;
       }(),
       .infer = infer_convolution_2d_weights_gradient,
       .family = "convolution",
       .expand = expand_convolution_2d_weights_gradient});
}

}  // namespace mg::ops
