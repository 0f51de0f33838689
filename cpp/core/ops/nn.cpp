// Neural-network composites: softmax, losses and optimizer updates. Each decomposes into
// primitive ops at build time, so every backend runs them and gradients come for free;
// softmax's and softmax_cross_entropy's gradients are gradient composites
// (gradient_composite.h), which a backend may run as one op.
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/ops/common.h"
#include "core/ops/gradient_composite.h"

namespace mg::ops {

namespace {

ValueRef reduce(Graph& g, const char* op, ValueRef x, std::vector<int64_t> axes, bool keep) {
  Attrs a{{"keep_dims", keep}};
  if (!axes.empty()) a["axes"] = axes;
  return call(g, op, {x}, a);
}

std::vector<TensorType> same_as_first_float(InferCtx& c) {
  require_class(c, 0, kFloat);
  return {c.in[0]};
}

// x - max(x) along axis, with the max held constant for differentiation (exact and stable)
ValueRef shifted(Graph& g, ValueRef x, int64_t axis) {
  ValueRef m = un(g, "stop_gradient", reduce(g, "reduction_maximum", x, {axis}, true));
  return bin(g, "subtraction", x, m);
}

ValueRef log_softmax_of(Graph& g, ValueRef x, int64_t axis) {
  ValueRef z = shifted(g, x, axis);
  ValueRef lse = un(g, "logarithm", reduce(g, "reduction_sum", un(g, "exponent", z), {axis}, true));
  return bin(g, "subtraction", z, lse);
}

const std::vector<std::string> kReductions = {"none", "sum", "mean"};

void check_reduction(InferCtx& c) {
  const std::string& r = c.s("reduction");
  for (auto& k : kReductions)
    if (r == k) return;
  c.fail(ErrorKind::Value, "reduction must be 'none', 'sum' or 'mean', not '" + r + "'");
}

ValueRef apply_reduction(Graph& g, ValueRef loss, const std::string& r) {
  if (r == "sum") return reduce(g, "reduction_sum", loss, {}, false);
  if (r == "mean") return reduce(g, "mean", loss, {}, false);
  return loss;
}

TensorType reduced_type(const TensorType& t, const std::string& r) { return r == "none" ? t : TensorType{t.dtype, {}}; }

void same_float_inputs(InferCtx& c, size_t n) {
  require_class(c, 0, kFloat);
  for (size_t i = 1; i < n; ++i)
    if (c.present(i)) c.same_dtype(0, i);
}


// ---- softmax ----

std::vector<TensorType> infer_softmax(InferCtx& c) {
  c.axis(c.i("axis"), int64_t(c.in[0].shape.size()));
  return same_as_first_float(c);
}

std::vector<ValueRef> expand_softmax(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  ValueRef e = un(g, "exponent", shifted(g, in[0], std::get<int64_t>(a.at("axis"))));
  ValueRef s = reduce(g, "reduction_sum", e, {std::get<int64_t>(a.at("axis"))}, true);
  return std::vector<ValueRef>{bin(g, "division", e, s)};
}

// ---- log_softmax ----

std::vector<TensorType> infer_log_softmax(InferCtx& c) {
  c.axis(c.i("axis"), int64_t(c.in[0].shape.size()));
  return same_as_first_float(c);
}

std::vector<ValueRef> expand_log_softmax(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  return std::vector<ValueRef>{log_softmax_of(g, in[0], std::get<int64_t>(a.at("axis")))};
}

// ---- softmax_cross_entropy ----

std::vector<TensorType> infer_softmax_cross_entropy(InferCtx& c) {
  same_float_inputs(c, 2);
  check_reduction(c);
  Shape s = c.broadcast({0, 1});
  int64_t ax = c.axis(c.i("axis"), int64_t(s.size()));
  s[size_t(ax)] = 1;
  return std::vector<TensorType>{reduced_type({c.in[0].dtype, s}, c.s("reduction"))};
}

std::vector<ValueRef> expand_softmax_cross_entropy(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  int64_t ax = std::get<int64_t>(a.at("axis"));
  ValueRef prod = bin(g, "multiplication", in[1], log_softmax_of(g, in[0], ax));
  ValueRef loss = un(g, "negative", reduce(g, "reduction_sum", prod, {ax}, true));
  return std::vector<ValueRef>{apply_reduction(g, loss, std::get<std::string>(a.at("reduction")))};
}

// ---- sigmoid_cross_entropy ----

std::vector<TensorType> infer_sigmoid_cross_entropy(InferCtx& c) {
  same_float_inputs(c, 2);
  check_reduction(c);
  return std::vector<TensorType>{reduced_type({c.in[0].dtype, c.broadcast({0, 1})}, c.s("reduction"))};
}

std::vector<ValueRef> expand_sigmoid_cross_entropy(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  ValueRef x = in[0], z = in[1];
  ValueRef soft = un(g, "log1p", un(g, "exponent", un(g, "negative", un(g, "absolute", x))));
  ValueRef loss = bin(g, "addition", bin(g, "subtraction", un(g, "relu", x), bin(g, "multiplication", x, z)), soft);
  return std::vector<ValueRef>{apply_reduction(g, loss, std::get<std::string>(a.at("reduction")))};
}

// ---- mean_squared_error ----

std::vector<TensorType> infer_mean_squared_error(InferCtx& c) {
  same_float_inputs(c, 2);
  check_reduction(c);
  return std::vector<TensorType>{reduced_type({c.in[0].dtype, c.broadcast({0, 1})}, c.s("reduction"))};
}

std::vector<ValueRef> expand_mean_squared_error(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  ValueRef loss = un(g, "square", bin(g, "subtraction", in[0], in[1]));
  return std::vector<ValueRef>{apply_reduction(g, loss, std::get<std::string>(a.at("reduction")))};
}

// ---- prelu ----

std::vector<TensorType> infer_prelu(InferCtx& c) {
  require_class(c, 0, kFloat);
  c.same_dtype(0, 1);
  return std::vector<TensorType>{{c.in[0].dtype, c.broadcast({0, 1})}};
}

std::vector<ValueRef> expand_prelu(Graph& g, const std::vector<ValueRef>& in, const Attrs&) {
  ValueRef x = in[0];
  return std::vector<ValueRef>{call(g, "select", {bin(g, "greater_than_or_equal_to", x, k(g, 0, x)),
                                                  x, bin(g, "multiplication", x, in[1])})};
}

// ---- stochastic_gradient_descent ----

std::vector<TensorType> infer_stochastic_gradient_descent(InferCtx& c) {
  same_float_inputs(c, 3);
  c.broadcast({1, 2});
  return std::vector<TensorType>{c.in[1]};
}

std::vector<ValueRef> expand_stochastic_gradient_descent(Graph& g, const std::vector<ValueRef>& in, const Attrs&) {
  return std::vector<ValueRef>{bin(g, "subtraction", in[1], bin(g, "multiplication", in[0], in[2]))};
}

// ---- momentum ----

std::vector<TensorType> infer_momentum(InferCtx& c) {
  same_float_inputs(c, 4);
  return std::vector<TensorType>{c.in[1], c.in[2]};
}

std::vector<ValueRef> expand_momentum(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  ValueRef lr = in[0], w = in[1], v = in[2], grad = in[3];
  ValueRef mu = k(g, std::get<double>(a.at("momentum")), w);
  ValueRef v2 = bin(g, "addition", bin(g, "multiplication", mu, v), grad);
  ValueRef step = std::get<bool>(a.at("nesterov")) ? bin(g, "addition", grad, bin(g, "multiplication", mu, v2)) : v2;
  return std::vector<ValueRef>{bin(g, "subtraction", w, bin(g, "multiplication", lr, step)), v2};
}

// ---- activations: compositions of elementwise ops ----

// softplus(x) = relu(x) + log(1 + exp(-|x|)): no overflow for any x
ValueRef softplus_of(Graph& g, ValueRef x) {
  return bin(g, "addition", un(g, "relu", x), un(g, "log1p", un(g, "exponent", un(g, "negative", un(g, "absolute", x)))));
}
// expm1(min(x, 0)): the negative branch of elu without inf (whose 0 * inf gradient is nan)
ValueRef expm1_neg(Graph& g, ValueRef x) { return un(g, "expm1", bin(g, "minimum", x, k(g, 0, x))); }

std::vector<ValueRef> expand_leaky_relu(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  ValueRef x = in[0];
  return {call(g, "select", {bin(g, "greater_than_or_equal_to", x, k(g, 0, x)), x,
                             bin(g, "multiplication", x, k(g, get_attr<double>(a, "alpha"), x))})};
}

std::vector<ValueRef> expand_elu(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  ValueRef x = in[0];
  return {call(g, "select", {bin(g, "greater_than", x, k(g, 0, x)), x,
                             bin(g, "multiplication", expm1_neg(g, x), k(g, get_attr<double>(a, "alpha"), x))})};
}

std::vector<ValueRef> expand_selu(Graph& g, const std::vector<ValueRef>& in, const Attrs&) {
  ValueRef x = in[0];
  const double alpha = 1.6732632423543772848170429916717, scale = 1.0507009873554804934193349852946;
  ValueRef e = call(g, "select", {bin(g, "greater_than", x, k(g, 0, x)), x,
                                  bin(g, "multiplication", expm1_neg(g, x), k(g, alpha, x))});
  return {bin(g, "multiplication", e, k(g, scale, x))};
}

std::vector<ValueRef> expand_gelu(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  ValueRef x = in[0];
  const std::string& mode = get_attr<std::string>(a, "approximate");
  ValueRef inner;
  if (mode == "tanh") {
    ValueRef cube = bin(g, "multiplication", x, bin(g, "multiplication", x, x));
    ValueRef u = bin(g, "multiplication", k(g, 0.7978845608028654, x),
                     bin(g, "addition", x, bin(g, "multiplication", k(g, 0.044715, x), cube)));
    inner = un(g, "tanh", u);
  } else if (mode == "none") {
    inner = un(g, "erf", bin(g, "multiplication", x, k(g, 0.7071067811865476, x)));
  } else {
    raise(ErrorKind::Value, "gelu", "", "approximate must be 'none' or 'tanh', not '" + mode + "'");
  }
  return {bin(g, "multiplication", bin(g, "multiplication", k(g, 0.5, x), x), bin(g, "addition", k(g, 1, x), inner))};
}

std::vector<ValueRef> expand_silu(Graph& g, const std::vector<ValueRef>& in, const Attrs&) {
  return {bin(g, "multiplication", in[0], un(g, "sigmoid", in[0]))};
}

std::vector<ValueRef> expand_softplus(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  ValueRef x = in[0];
  double beta = get_attr<double>(a, "beta");
  if (beta == 1.0) return {softplus_of(g, x)};
  return {bin(g, "division", softplus_of(g, bin(g, "multiplication", x, k(g, beta, x))), k(g, beta, x))};
}

std::vector<ValueRef> expand_softsign(Graph& g, const std::vector<ValueRef>& in, const Attrs&) {
  ValueRef x = in[0];
  return {bin(g, "division", x, bin(g, "addition", k(g, 1, x), un(g, "absolute", x)))};
}

std::vector<ValueRef> expand_hard_sigmoid(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  ValueRef x = in[0];
  ValueRef lin = bin(g, "addition", bin(g, "multiplication", x, k(g, get_attr<double>(a, "alpha"), x)),
                     k(g, get_attr<double>(a, "beta"), x));
  return {call(g, "clamp", {lin, k(g, 0, x), k(g, 1, x)})};
}

std::vector<ValueRef> expand_hard_swish(Graph& g, const std::vector<ValueRef>& in, const Attrs&) {
  ValueRef x = in[0];
  ValueRef lin = bin(g, "addition", bin(g, "multiplication", x, k(g, 1.0 / 6.0, x)), k(g, 0.5, x));
  return {bin(g, "multiplication", x, call(g, "clamp", {lin, k(g, 0, x), k(g, 1, x)}))};
}

std::vector<ValueRef> expand_mish(Graph& g, const std::vector<ValueRef>& in, const Attrs&) {
  return {bin(g, "multiplication", in[0], un(g, "tanh", softplus_of(g, in[0])))};
}

std::vector<ValueRef> expand_log_sigmoid(Graph& g, const std::vector<ValueRef>& in, const Attrs&) {
  return {un(g, "negative", softplus_of(g, un(g, "negative", in[0])))};
}

// One activation: a composite of x alone, float in, float out.
void register_activation(const char* name, const char* doc, std::vector<AttrSpec> attrs, ExpandFn expand,
                         std::vector<std::string> aliases = {}) {
  register_op({.name = name,
               .doc = doc,
               .inputs = {{"x"}},
               .attrs = std::move(attrs),
               .infer = same_as_first_float,
               .aliases = std::move(aliases),
               .family = "activation",
               .expand = std::move(expand),
               .per_sample = per_sample_broadcast});
}

// ---- adam / adamw ----

std::vector<TensorType> infer_adam(InferCtx& c) {
  same_float_inputs(c, 11);
  if (!c.present(10)) c.fail(ErrorKind::Value, "missing input 'gradient'");
  std::vector<TensorType> r{c.in[6], c.in[7], c.in[8]};
  if (c.present(9)) r.push_back(c.in[9]);
  return r;
}

std::vector<ValueRef> adam_update(Graph& g, const std::vector<ValueRef>& in, double wd) {
  ValueRef lr = in[0], b1 = in[1], b2 = in[2], eps = in[3], b1p = in[4], b2p = in[5];
  ValueRef w = in[6], m = in[7], v = in[8], vmax = in[9], grad = in[10];
  ValueRef one = k(g, 1, w);
  // lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t), as MPSGraph and TensorFlow
  ValueRef lr_t = bin(g, "division", bin(g, "multiplication", lr, un(g, "square_root", bin(g, "subtraction", one, b2p))),
                      bin(g, "subtraction", one, b1p));
  ValueRef m2 = bin(g, "addition", bin(g, "multiplication", b1, m),
                    bin(g, "multiplication", bin(g, "subtraction", one, b1), grad));
  ValueRef v2 = bin(g, "addition", bin(g, "multiplication", b2, v),
                    bin(g, "multiplication", bin(g, "subtraction", one, b2), un(g, "square", grad)));
  ValueRef denom_v = v2, vmax2;
  if (vmax.valid()) {
    vmax2 = bin(g, "maximum", vmax, v2);
    denom_v = vmax2;
  }
  ValueRef update = bin(g, "division", bin(g, "multiplication", lr_t, m2),
                        bin(g, "addition", un(g, "square_root", denom_v), eps));
  ValueRef w2 = w;
  if (wd != 0.0)  // decoupled weight decay (AdamW)
    w2 = bin(g, "subtraction", w, bin(g, "multiplication", bin(g, "multiplication", lr, k(g, wd, w)), w));
  w2 = bin(g, "subtraction", w2, update);
  std::vector<ValueRef> r{w2, m2, v2};
  if (vmax.valid()) r.push_back(vmax2);
  return r;
}

std::vector<ValueRef> expand_adam(Graph& g, const std::vector<ValueRef>& in, const Attrs&) {
  return adam_update(g, in, 0.0);
}
std::vector<ValueRef> expand_adamw(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  return adam_update(g, in, get_attr<double>(a, "weight_decay"));
}

std::vector<InputSpec> adam_inputs() {
  return {{"learning_rate"}, {"beta1"}, {"beta2"}, {"epsilon"}, {"beta1_power"}, {"beta2_power"},
          {"values"}, {"momentum"}, {"velocity"}, {"maximum_velocity", false, true}, {"gradient"}};
}

}  // namespace

void register_nn_ops() {
  register_op_with_gradient_composite({.name = "softmax",
               .doc = "exp(x) / sum(exp(x)) along axis, computed stably (x - max(x)).",
               .inputs = {{"x"}},
               .attrs = {attr("axis", AttrKind::Int, int64_t(-1))},
               .infer = infer_softmax,
               .family = "nn",
               .expand = expand_softmax}, {0});
  register_op({.name = "log_softmax",
               .doc = "log(softmax(x)) along axis, computed stably.",
               .inputs = {{"x"}},
               .attrs = {attr("axis", AttrKind::Int, int64_t(-1))},
               .infer = infer_log_softmax,
               .family = "nn",
               .expand = expand_log_softmax});
  register_op_with_gradient_composite({.name = "softmax_cross_entropy",
               .doc = "-sum(labels * log_softmax(source), axis) per sample, as MPSGraph's "
                      "softMaxCrossEntropy: labels are probabilities of source's shape. reduction 'none' keeps the "
                      "reduced axis (size 1), 'sum' and 'mean' give a scalar (mean over the per-sample losses).",
               .inputs = {{"source"}, {"labels"}},
               .attrs = {attr("axis", AttrKind::Int, int64_t(-1)), attr("reduction", AttrKind::String, std::string("mean"))},
               .infer = infer_softmax_cross_entropy,
               .family = "nn",
               .expand = expand_softmax_cross_entropy}, {0});
  register_op({.name = "sigmoid_cross_entropy",
               .doc = "Binary cross entropy of sigmoid(source) against labels in [0, 1], computed stably as "
                      "max(x, 0) - x*z + log(1 + exp(-|x|)); reduction none/sum/mean.",
               .inputs = {{"source"}, {"labels"}},
               .attrs = {attr("reduction", AttrKind::String, std::string("mean"))},
               .infer = infer_sigmoid_cross_entropy,
               .family = "nn",
               .expand = expand_sigmoid_cross_entropy});
  register_op({.name = "mean_squared_error",
               .doc = "(predictions - labels)**2 with reduction none/sum/mean.",
               .inputs = {{"predictions"}, {"labels"}},
               .attrs = {attr("reduction", AttrKind::String, std::string("mean"))},
               .infer = infer_mean_squared_error,
               .family = "nn",
               .expand = expand_mean_squared_error});

  // ---- activations: compositions of elementwise ops ----
  register_activation("leaky_relu", "x if x >= 0 else alpha * x.", {attr("alpha", AttrKind::Float, 0.01)},
                      expand_leaky_relu);
  register_op({.name = "prelu",
               .doc = "x if x >= 0 else alpha * x, with a learned alpha tensor broadcast against x.",
               .inputs = {{"x"}, {"alpha"}},
               .infer = infer_prelu,
               .family = "activation",
               .expand = expand_prelu});
  register_activation("elu", "x if x > 0 else alpha * (exp(x) - 1).", {attr("alpha", AttrKind::Float, 1.0)}, expand_elu);
  register_activation("selu", "scale * elu(x, alpha) with the self-normalising constants.", {}, expand_selu);
  register_activation("gelu", "x * Phi(x); approximate='tanh' uses 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).",
                      {attr("approximate", AttrKind::String, std::string("none"), "'none' (exact, erf) or 'tanh'")},
                      expand_gelu);
  register_activation("silu", "x * sigmoid(x).", {}, expand_silu, {"swish"});
  register_activation("softplus", "log(1 + exp(beta * x)) / beta, computed without overflow.",
                      {attr("beta", AttrKind::Float, 1.0)}, expand_softplus);
  register_activation("softsign", "x / (1 + |x|).", {}, expand_softsign);
  register_activation("hard_sigmoid", "clamp(alpha * x + beta, 0, 1); the defaults are PyTorch's (ONNX uses alpha=0.2).",
                      {attr("alpha", AttrKind::Float, 1.0 / 6.0), attr("beta", AttrKind::Float, 0.5)},
                      expand_hard_sigmoid);
  register_activation("hard_swish", "x * hard_sigmoid(x) = x * clamp(x / 6 + 0.5, 0, 1).", {}, expand_hard_swish);
  register_activation("mish", "x * tanh(softplus(x)).", {}, expand_mish);
  register_activation("log_sigmoid", "log(sigmoid(x)) = -softplus(-x), stable for any x.", {}, expand_log_sigmoid);

  // ---- optimizer updates (MPSGraph's optimizer ops): return the new values, assign them yourself ----
  register_op({.name = "stochastic_gradient_descent",
               .doc = "values - learning_rate * gradient (MPSGraph's stochasticGradientDescent).",
               .inputs = {{"learning_rate"}, {"values"}, {"gradient"}},
               .infer = infer_stochastic_gradient_descent,
               .family = "optimizer",
               .expand = expand_stochastic_gradient_descent});
  register_op({.name = "momentum",
               .doc = "SGD with momentum: velocity' = momentum * velocity + gradient; values' = values - "
                      "learning_rate * velocity' (nesterov: values - learning_rate * (gradient + momentum * "
                      "velocity')). Returns (values', velocity').",
               .inputs = {{"learning_rate"}, {"values"}, {"velocity"}, {"gradient"}},
               .attrs = {attr("momentum", AttrKind::Float, 0.9), attr("nesterov", AttrKind::Bool, false)},
               .infer = infer_momentum,
               .multi_output = true,
               .family = "optimizer",
               .expand = expand_momentum});
  register_op({.name = "adam",
               .doc = "Adam update as MPSGraph's adam op: returns (values', momentum', velocity'[, maximum_velocity']). "
                      "beta1_power/beta2_power are beta**t for the current step t (starting at 1); give "
                      "maximum_velocity for AMSGrad.",
               .inputs = adam_inputs(),
               .infer = infer_adam,
               .multi_output = true,
               .family = "optimizer",
               .expand = expand_adam});
  register_op({.name = "adamw",
               .doc = "Adam with decoupled weight decay (AdamW): values are first scaled by (1 - learning_rate * "
                      "weight_decay), then updated as adam.",
               .inputs = adam_inputs(),
               .attrs = {attr("weight_decay", AttrKind::Float, 0.01)},
               .infer = infer_adam,
               .multi_output = true,
               .family = "optimizer",
               .expand = expand_adamw});
}

}  // namespace mg::ops
