// Normalisation layers as compositions of reductions and elementwise ops (MPSGraph has
// mean, variance and normalization ops and builds layers from them the same way).
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "core/ops/common.h"
#include "core/ops/gradient_composite.h"

namespace mg::ops {

namespace {


ValueRef mean_over(Graph& g, ValueRef x, const std::vector<int64_t>& axes) {
  return call(g, "mean", {x}, {{"axes", axes}, {"keep_dims", true}});
}
ValueRef var_over(Graph& g, ValueRef x, const std::vector<int64_t>& axes) {
  return call(g, "variance", {x}, {{"axes", axes}, {"keep_dims", true}});
}

// (x - mean) / sqrt(variance + epsilon) * gamma + beta, gamma and beta optional
ValueRef normalize(Graph& g, ValueRef x, ValueRef mean, ValueRef var, ValueRef gamma, ValueRef beta, double eps) {
  ValueRef y = bin(g, "multiplication", bin(g, "subtraction", x, mean),
                   call(g, "reverse_square_root", {bin(g, "addition", var, k(g, eps, var))}));
  if (gamma.valid()) y = bin(g, "multiplication", y, gamma);
  if (beta.valid()) y = bin(g, "addition", y, beta);
  return y;
}

// Reshapes a per-channel (C,) parameter so it broadcasts along `channel_axis` of a rank-r tensor.
ValueRef per_channel(Graph& g, ValueRef p, int64_t channel_axis, int64_t rank) {
  if (!p.valid() || channel_axis == rank - 1) return p;
  std::vector<int64_t> axes;
  for (int64_t i = channel_axis + 1; i < rank; ++i) axes.push_back(i - channel_axis);
  return call(g, "expand_dims", {p}, {{"axes", axes}});
}

int64_t channel_axis_of(const std::string& layout, int64_t rank) { return layout[1] == 'C' ? 1 : rank - 1; }

void check_layout(InferCtx& c) {
  const std::string& l = c.s("data_layout");
  if (l != "NHWC" && l != "NCHW" && l != "NDHWC" && l != "NCDHW" && l != "NLC" && l != "NCL")
    c.fail(ErrorKind::Value, "data_layout must be channels-last (NHWC, NDHWC, NLC) or channels-first (NCHW, NCDHW, NCL), not '" + l + "'");
  if (int64_t(l.size()) != int64_t(c.in[0].shape.size()))
    c.fail(ErrorKind::Value, "data_layout '" + l + "' does not fit input " + type_str(c.in[0]));
}

void check_param(InferCtx& c, size_t i, int64_t channels, const char* what) {
  if (!c.present(i)) return;
  c.same_dtype(0, i);
  const Shape& s = c.in[i].shape;
  if (s.size() != 1 || (channels >= 0 && s[0] >= 0 && s[0] != channels))
    c.fail(ErrorKind::Value, std::string(what) + " must have shape (" + std::to_string(channels) + ",), got " + shape_str(s));
}


// ---- normalization ----

std::vector<TensorType> infer_normalization(InferCtx& c) {
  require_class(c, 0, kFloat);
  std::vector<size_t> idx{0, 1, 2};
  for (size_t i = 1; i < 5; ++i)
    if (c.present(i)) {
      c.same_dtype(0, i);
      if (i > 2) idx.push_back(i);
    }
  return std::vector<TensorType>{{c.in[0].dtype, c.broadcast(idx)}};
}

std::vector<ValueRef> expand_normalization(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  return std::vector<ValueRef>{normalize(g, in[0], in[1], in[2], in[3], in[4], std::get<double>(a.at("epsilon")))};
}

// ---- moments ----

std::vector<TensorType> infer_moments(InferCtx& c) {
  require_class(c, 0, kFloat);
  Shape s = c.in[0].shape;
  auto axes = c.axes(c.ints("axes"), int64_t(s.size()));
  c.attrs["axes"] = axes;
  for (auto ax : axes) s[size_t(ax)] = 1;
  return std::vector<TensorType>{{c.in[0].dtype, s}, {c.in[0].dtype, s}};
}

std::vector<ValueRef> expand_moments(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  auto& axes = std::get<std::vector<int64_t>>(a.at("axes"));
  return std::vector<ValueRef>{mean_over(g, in[0], axes), var_over(g, in[0], axes)};
}

// ---- batch_normalization ----

std::vector<TensorType> infer_batch_normalization(InferCtx& c) {
  require_class(c, 0, kFloat);
  int64_t rank = int64_t(c.in[0].shape.size());
  if (rank < 2) c.fail(ErrorKind::Value, "input must have rank >= 2, got " + type_str(c.in[0]));
  int64_t ax = c.axis(c.i("channel_axis"), rank);
  c.attrs["channel_axis"] = ax;
  int64_t ch = c.in[0].shape[size_t(ax)];
  const char* names[] = {"", "gamma", "beta", "running_mean", "running_variance"};
  for (size_t i = 1; i < 5; ++i) check_param(c, i, ch, names[i]);
  if (!c.b("training") && (!c.present(3) || !c.present(4)))
    c.fail(ErrorKind::Value, "training=False needs running_mean and running_variance");
  return std::vector<TensorType>{c.in[0]};
}

std::vector<ValueRef> expand_batch_normalization(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  ValueRef x = in[0];
  int64_t rank = int64_t(g.type(x).shape.size()), ax = std::get<int64_t>(a.at("channel_axis"));
  ValueRef mean, var;
  if (std::get<bool>(a.at("training"))) {
    std::vector<int64_t> axes;
    for (int64_t i = 0; i < rank; ++i)
      if (i != ax) axes.push_back(i);
    mean = mean_over(g, x, axes);
    var = var_over(g, x, axes);
  } else {
    mean = per_channel(g, in[3], ax, rank);
    var = per_channel(g, in[4], ax, rank);
  }
  return std::vector<ValueRef>{normalize(g, x, mean, var, per_channel(g, in[1], ax, rank),
                                         per_channel(g, in[2], ax, rank), std::get<double>(a.at("epsilon")))};
}

// ---- layer_normalization ----

std::vector<TensorType> infer_layer_normalization(InferCtx& c) {
  require_class(c, 0, kFloat);
  c.attrs["axes"] = c.axes(c.ints("axes"), int64_t(c.in[0].shape.size()));
  std::vector<size_t> idx{0};
  for (size_t i = 1; i < 3; ++i)
    if (c.present(i)) {
      c.same_dtype(0, i);
      idx.push_back(i);
    }
  Shape s = c.broadcast(idx);
  if (s.size() != c.in[0].shape.size()) c.fail(ErrorKind::Value, "gamma/beta have more dims than x " + type_str(c.in[0]));
  return std::vector<TensorType>{c.in[0]};
}

std::vector<ValueRef> expand_layer_normalization(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  auto& axes = std::get<std::vector<int64_t>>(a.at("axes"));
  return std::vector<ValueRef>{normalize(g, in[0], mean_over(g, in[0], axes), var_over(g, in[0], axes), in[1],
                                         in[2], std::get<double>(a.at("epsilon")))};
}

// ---- instance_normalization ----

std::vector<TensorType> infer_instance_normalization(InferCtx& c) {
  require_class(c, 0, kFloat);
  check_layout(c);
  int64_t rank = int64_t(c.in[0].shape.size());
  int64_t ch = c.in[0].shape[size_t(channel_axis_of(c.s("data_layout"), rank))];
  check_param(c, 1, ch, "gamma");
  check_param(c, 2, ch, "beta");
  return std::vector<TensorType>{c.in[0]};
}

std::vector<ValueRef> expand_instance_normalization(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  ValueRef x = in[0];
  int64_t rank = int64_t(g.type(x).shape.size());
  int64_t ax = channel_axis_of(std::get<std::string>(a.at("data_layout")), rank);
  std::vector<int64_t> axes;
  for (int64_t i = 1; i < rank; ++i)
    if (i != ax) axes.push_back(i);
  return std::vector<ValueRef>{normalize(g, x, mean_over(g, x, axes), var_over(g, x, axes),
                                         per_channel(g, in[1], ax, rank), per_channel(g, in[2], ax, rank),
                                         std::get<double>(a.at("epsilon")))};
}

// ---- group_normalization ----

std::vector<TensorType> infer_group_normalization(InferCtx& c) {
  require_class(c, 0, kFloat);
  check_layout(c);
  const Shape& s = c.in[0].shape;
  int64_t ax = channel_axis_of(c.s("data_layout"), int64_t(s.size()));
  int64_t ch = s[size_t(ax)], groups = c.i("num_groups");
  for (size_t i = 1; i < s.size(); ++i)
    if (s[i] < 0) c.fail(ErrorKind::Value, "channel and spatial dims must be known, got " + type_str(c.in[0]));
  if (groups <= 0 || ch % groups != 0)
    c.fail(ErrorKind::Value, "num_groups " + std::to_string(groups) + " does not divide " + std::to_string(ch) + " channels");
  check_param(c, 1, ch, "gamma");
  check_param(c, 2, ch, "beta");
  return std::vector<TensorType>{c.in[0]};
}

std::vector<ValueRef> expand_group_normalization(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  ValueRef x = in[0];
  Shape s = g.type(x).shape;
  int64_t rank = int64_t(s.size());
  bool last = std::get<std::string>(a.at("data_layout"))[1] != 'C';
  int64_t groups = std::get<int64_t>(a.at("num_groups"));
  ValueRef xc = x;  // channels-first view
  if (last) {
    std::vector<int64_t> perm{0, rank - 1};
    for (int64_t i = 1; i < rank - 1; ++i) perm.push_back(i);
    xc = call(g, "transpose", {x}, {{"permutation", perm}});
  }
  int64_t per_group = 1;
  Shape cs = g.type(xc).shape;
  for (int64_t i = 1; i < rank; ++i) per_group *= cs[size_t(i)];
  per_group /= groups;
  ValueRef grouped = call(g, "reshape", {xc}, {{"shape", std::vector<int64_t>{-1, groups, per_group}}});
  ValueRef ng = normalize(g, grouped, mean_over(g, grouped, {2}), var_over(g, grouped, {2}), ValueRef{},
                          ValueRef{}, std::get<double>(a.at("epsilon")));
  ValueRef y = call(g, "reshape_like", {ng, xc});
  if (last) {
    std::vector<int64_t> perm{0};
    for (int64_t i = 2; i < rank; ++i) perm.push_back(i);
    perm.push_back(1);
    y = call(g, "transpose", {y}, {{"permutation", perm}});
  }
  int64_t ax = last ? rank - 1 : 1;
  ValueRef gamma = per_channel(g, in[1], ax, rank), beta = per_channel(g, in[2], ax, rank);
  if (gamma.valid()) y = bin(g, "multiplication", y, gamma);
  if (beta.valid()) y = bin(g, "addition", y, beta);
  return std::vector<ValueRef>{y};
}

// ---- local_response_normalization ----

std::vector<TensorType> infer_local_response_normalization(InferCtx& c) {
  require_class(c, 0, kFloat);
  check_layout(c);
  int64_t ax = channel_axis_of(c.s("data_layout"), int64_t(c.in[0].shape.size()));
  if (c.in[0].shape[size_t(ax)] < 0) c.fail(ErrorKind::Value, "the channel dim must be known, got " + type_str(c.in[0]));
  if (c.i("size") <= 0) c.fail(ErrorKind::Value, "size must be positive");
  return std::vector<TensorType>{c.in[0]};
}

std::vector<ValueRef> expand_local_response_normalization(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  ValueRef x = in[0];
  int64_t rank = int64_t(g.type(x).shape.size());
  int64_t ax = channel_axis_of(std::get<std::string>(a.at("data_layout")), rank);
  int64_t ch = g.type(x).shape[size_t(ax)], size = std::get<int64_t>(a.at("size"));
  std::vector<int64_t> lo(size_t(rank), 0), hi(size_t(rank), 0);
  lo[size_t(ax)] = size / 2;
  hi[size_t(ax)] = (size - 1) / 2;
  ValueRef sq = call(g, "square", {x});
  ValueRef padded = call(g, "pad", {sq}, {{"left_padding", lo}, {"right_padding", hi}});
  ValueRef sum;
  for (int64_t i = 0; i < size; ++i) {
    ValueRef s = call(g, "slice", {padded}, {{"axis", ax}, {"start", i}, {"length", ch}});
    sum = sum.valid() ? bin(g, "addition", sum, s) : s;
  }
  double alpha = std::get<double>(a.at("alpha")), beta = std::get<double>(a.at("beta"));
  ValueRef denom = bin(g, "addition", k(g, std::get<double>(a.at("bias")), x), bin(g, "multiplication", sum, k(g, alpha / double(size), x)));
  return std::vector<ValueRef>{bin(g, "division", x, bin(g, "power", denom, k(g, beta, x)))};
}

}  // namespace

void register_normalization_ops() {
  register_op({.name = "normalization",
               .doc = "(x - mean) / sqrt(variance + epsilon) * gamma + beta, all broadcast (MPSGraph's "
                      "normalizationWithTensor:mean:variance:gamma:beta:epsilon:). gamma and beta may be None.",
               .inputs = {{"x"}, {"mean"}, {"variance"}, {"gamma", false, true}, {"beta", false, true}},
               .attrs = {attr("epsilon", AttrKind::Float, 1e-5)},
               .infer = infer_normalization,
               .family = "normalization",
               .expand = expand_normalization});
  register_op({.name = "moments",
               .doc = "(mean, variance) over axes, reduced axes kept (population variance).",
               .inputs = {{"x"}},
               .attrs = {attr("axes", AttrKind::Axes)},
               .infer = infer_moments,
               .multi_output = true,
               .family = "normalization",
               .expand = expand_moments});
  register_op_with_gradient_composite({.name = "batch_normalization",
               .doc = "Batch normalisation over every axis but channel_axis. training=True uses the batch's "
                      "statistics (update running statistics yourself from moments()); training=False uses "
                      "running_mean and running_variance.",
               .inputs = {{"x"}, {"gamma", false, true}, {"beta", false, true}, {"running_mean", false, true},
                          {"running_variance", false, true}},
               .attrs = {attr("training", AttrKind::Bool, true), attr("epsilon", AttrKind::Float, 1e-5),
                         attr("channel_axis", AttrKind::Int, int64_t(-1))},
               .infer = infer_batch_normalization,
               .family = "normalization",
               .expand = expand_batch_normalization}, {0, 1, 2});
  register_op_with_gradient_composite({.name = "layer_normalization",
               .doc = "Normalises over `axes` (default: the last) per sample; gamma and beta broadcast against x.",
               .inputs = {{"x"}, {"gamma", false, true}, {"beta", false, true}},
               .attrs = {attr("axes", AttrKind::Axes, std::vector<int64_t>{-1}), attr("epsilon", AttrKind::Float, 1e-5)},
               .infer = infer_layer_normalization,
               .family = "normalization",
               .expand = expand_layer_normalization}, {0, 1, 2});
  register_op_with_gradient_composite({.name = "instance_normalization",
               .doc = "Normalises each (sample, channel) over the spatial dims; gamma and beta are per channel.",
               .inputs = {{"x"}, {"gamma", false, true}, {"beta", false, true}},
               .attrs = {attr("epsilon", AttrKind::Float, 1e-5), attr("data_layout", AttrKind::String, std::string("NHWC"))},
               .infer = infer_instance_normalization,
               .family = "normalization",
               .expand = expand_instance_normalization}, {0, 1, 2});
  register_op_with_gradient_composite({.name = "group_normalization",
               .doc = "Splits channels into num_groups groups and normalises each (sample, group) over its "
                      "channels and spatial dims; gamma and beta are per channel. Needs static channel and "
                      "spatial dims (the batch may be unknown).",
               .inputs = {{"x"}, {"gamma", false, true}, {"beta", false, true}},
               .attrs = {attr("num_groups", AttrKind::Int), attr("epsilon", AttrKind::Float, 1e-5),
                         attr("data_layout", AttrKind::String, std::string("NHWC"))},
               .infer = infer_group_normalization,
               .family = "normalization",
               .expand = expand_group_normalization}, {0, 1, 2});
  register_op({.name = "local_response_normalization",
               .doc = "x / (bias + alpha / size * sum of x^2 over `size` neighbouring channels)^beta, as PyTorch's "
                      "LocalResponseNorm (channels padded with zeros).",
               .inputs = {{"x"}},
               .attrs = {attr("size", AttrKind::Int, int64_t(5)), attr("alpha", AttrKind::Float, 1e-4),
                         attr("beta", AttrKind::Float, 0.75), attr("bias", AttrKind::Float, 1.0),
                         attr("data_layout", AttrKind::String, std::string("NCHW"))},
               .infer = infer_local_response_normalization,
               .family = "normalization",
               .expand = expand_local_response_normalization});
}

}  // namespace mg::ops
