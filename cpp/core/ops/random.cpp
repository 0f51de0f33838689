// Random numbers: one stateful primitive (uniform bits shaped like a tensor) and
// composites for the distributions and dropout. Each run of an executable draws fresh
// numbers; the same seed gives the same sequence of runs in every new executable.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <variant>
#include <vector>

#include "core/ops/common.h"
#include "core/ops/random_attrs.h"

namespace mg::ops {

namespace {


RandomUniformAttrs decode_random_uniform(const Attrs& a) { return {get_attr<int64_t>(a, "seed")}; }  // random_attrs.h

int64_t seed_of(const Attrs& a, int64_t salt) {
  int64_t s = a.count("seed") ? std::get<int64_t>(a.at("seed")) : 0;
  // decorrelates the draws inside one composite; wraps (in unsigned arithmetic: no signed overflow)
  return int64_t(uint64_t(s) * 2654435761ULL + uint64_t(salt));
}

ValueRef uniform_like(Graph& g, ValueRef like, DType dtype, int64_t seed) {
  return call(g, "random_uniform_like", {like}, {{"seed", seed}, {"dtype", dtype}});
}

// Shape source for the static-shape forms: a constant folded away at specialisation.
ValueRef shape_source(Graph& g, const Attrs& a) {
  const Shape& s = std::get<std::vector<int64_t>>(a.at("shape"));
  return call(g, "zeros", {}, {{"shape", s}, {"dtype", DType::Bool}});
}

DType dtype_of(const Attrs& a) { return std::get<DType>(a.at("dtype")); }

// The largest value of dtype d below hi: scaling a draw in [0, 1) to [lo, hi) can round up
// to hi itself in float16/bfloat16 (and float32), so the result is clamped to this.
double largest_below(double hi, DType d) {
  auto a = Array::empty(d, {});
  store_from_double(a->data(), d, 0, hi);
  double v = load_as_double(a->data(), d, 0);
  if (v < hi) return v;
  if (d == DType::Float64) return std::nextafter(hi, -HUGE_VAL);
  if (d == DType::Float32) return double(std::nextafter(float(v), -HUGE_VALF));
  uint16_t bits;  // float16 / bfloat16: one step down in the bit pattern
  std::memcpy(&bits, a->data(), 2);
  if (v > 0) bits = uint16_t(bits - 1);
  else if (v == 0) bits = 0x8001;  // the smallest negative subnormal
  else bits = uint16_t(bits + 1);
  std::memcpy(a->data(), &bits, 2);
  return load_as_double(a->data(), d, 0);
}

// Inverse error function from elementwise ops (M. Giles, "Approximating the erfinv
// function", GPU Computing Gems, 2010; single-precision branch pair).
ValueRef erfinv_of(Graph& g, ValueRef x) {
  ValueRef w = un(g, "negative", un(g, "logarithm", bin(g, "multiplication", bin(g, "subtraction", k(g, 1, x), x),
                                                         bin(g, "addition", k(g, 1, x), x))));
  auto poly = [&](ValueRef t, const std::vector<double>& c) {
    ValueRef p = k(g, c[0], x);
    for (size_t i = 1; i < c.size(); ++i) p = bin(g, "addition", k(g, c[i], x), bin(g, "multiplication", p, t));
    return p;
  };
  ValueRef small = poly(bin(g, "subtraction", w, k(g, 2.5, x)),
                        {2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
                         -0.00417768164, 0.246640727, 1.50140941});
  ValueRef large = poly(bin(g, "subtraction", un(g, "square_root", w), k(g, 3, x)),
                        {-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
                         0.00943887047, 1.00167406, 2.83297682});
  ValueRef p = call(g, "select", {bin(g, "less_than", w, k(g, 5, x)), small, large});
  // at |x| == 1 the polynomial sees w = inf: give sign(x) * inf (sign has a zero gradient,
  // so the unused branch adds no 0 * inf = nan to gradients)
  ValueRef edge = bin(g, "multiplication", un(g, "sign", x), k(g, HUGE_VAL, x));
  return call(g, "select", {bin(g, "equal", un(g, "absolute", x), k(g, 1, x)), edge, bin(g, "multiplication", p, x)});
}

// Without a seed, an op's stream is keyed by its node's name, so two ops never share
// numbers (two dropout layers of one shape drew the same mask when the default was 0)
// and a graph built the same way draws the same sequence.
void default_seed(InferCtx& c) {
  if (c.has("seed")) return;
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char ch : c.node) h = (h ^ ch) * 1099511628211ull;
  c.attrs["seed"] = int64_t(h >> 33);
}

std::vector<TensorType> static_shape_type(InferCtx& c) {
  default_seed(c);
  for (auto d : c.ints("shape"))
    if (d < 0) c.fail(ErrorKind::Value, "shape " + shape_str(c.ints("shape")) + " must be fully known; use the _like form");
  if (!is_floating(c.dtype("dtype"))) c.fail(ErrorKind::Type, std::string("dtype must be floating, not ") + dtype_name(c.dtype("dtype")));
  return {{c.dtype("dtype"), c.ints("shape")}};
}

std::vector<TensorType> like_type(InferCtx& c) {
  default_seed(c);
  DType d = c.has("dtype") ? c.dtype("dtype") : c.in[0].dtype;
  if (!is_floating(d)) c.fail(ErrorKind::Type, std::string("dtype must be floating, not ") + dtype_name(d));
  return {{d, c.in[0].shape}};
}

GradFn no_grad_through_randomness() {
  // the numbers do not depend on the values of `like`
  return [](GradCtx& c) { return std::vector<ValueRef>(c.node.inputs.size(), ValueRef{}); };
}


// ---- random_uniform ----

std::vector<ValueRef> expand_random_uniform(Graph& g, const std::vector<ValueRef>&, const Attrs& a) {
  ValueRef u = uniform_like(g, shape_source(g, a), dtype_of(a), seed_of(a, 0));
  double lo = std::get<double>(a.at("minimum")), hi = std::get<double>(a.at("maximum"));
  ValueRef r = bin(g, "addition", bin(g, "multiplication", u, k(g, hi - lo, u)), k(g, lo, u));
  if (hi > lo) r = bin(g, "minimum", r, k(g, largest_below(hi, dtype_of(a)), u));
  return std::vector<ValueRef>{r};
}

// ---- random_truncated_normal ----

std::vector<ValueRef> expand_random_truncated_normal(Graph& g, const std::vector<ValueRef>&, const Attrs& a) {
  ValueRef u = uniform_like(g, shape_source(g, a), dtype_of(a), seed_of(a, 0));
  // u in [0,1) -> v in (-erf(sqrt 2), erf(sqrt 2)) -> z = sqrt2 * erfinv(v) in (-2, 2)
  const double e = 0.9544997361036416;  // erf(2 / sqrt 2)
  ValueRef v = bin(g, "multiplication", bin(g, "subtraction", bin(g, "multiplication", u, k(g, 2, u)), k(g, 1, u)),
                   k(g, e, u));
  ValueRef z = bin(g, "multiplication", erfinv_of(g, v), k(g, 1.4142135623730951, u));
  double mean = std::get<double>(a.at("mean")), sd = std::get<double>(a.at("standard_deviation"));
  return std::vector<ValueRef>{bin(g, "addition", bin(g, "multiplication", z, k(g, sd, z)), k(g, mean, z))};
}

const char* const kSeedDoc =
    "the same seed gives the same sequence of runs; without one, the op's node name picks its stream";

// ---- random_bernoulli ----

std::vector<TensorType> infer_random_bernoulli(InferCtx& c) {
  default_seed(c);
  double p = c.f("probability");
  if (!(p >= 0 && p <= 1)) c.fail(ErrorKind::Value, "probability must be in [0, 1], got " + std::to_string(p));
  for (auto d : c.ints("shape"))
    if (d < 0) c.fail(ErrorKind::Value, "shape " + shape_str(c.ints("shape")) + " must be fully known");
  return std::vector<TensorType>{{c.dtype("dtype"), c.ints("shape")}};
}

std::vector<ValueRef> expand_random_bernoulli(Graph& g, const std::vector<ValueRef>&, const Attrs& a) {
  ValueRef u = uniform_like(g, shape_source(g, a), DType::Float32, seed_of(a, 0));
  ValueRef hit = bin(g, "less_than", u, k(g, std::get<double>(a.at("probability")), u));
  return std::vector<ValueRef>{call(g, "cast", {hit}, {{"dtype", dtype_of(a)}})};
}

// ---- dropout ----

std::vector<TensorType> infer_dropout(InferCtx& c) {
  default_seed(c);
  require_class(c, 0, kFloat);
  double r = c.f("rate");
  if (!(r >= 0 && r < 1)) c.fail(ErrorKind::Value, "rate must be in [0, 1), got " + std::to_string(r));
  return std::vector<TensorType>{c.in[0]};
}

std::vector<ValueRef> grad_dropout(GradCtx& c) {
  return std::vector<ValueRef>{call(c.g, "dropout", {c.dy[0]}, c.node.attrs)};
}

std::vector<ValueRef> expand_dropout(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  ValueRef x = in[0];
  double rate = std::get<double>(a.at("rate"));
  if (rate == 0) return std::vector<ValueRef>{x};
  ValueRef keep = bin(g, "greater_than_or_equal_to", uniform_like(g, x, g.type(x).dtype, seed_of(a, 0)), k(g, rate, x));
  ValueRef scaled = bin(g, "multiplication", x, k(g, 1.0 / (1.0 - rate), x));
  return std::vector<ValueRef>{call(g, "select", {keep, scaled, k(g, 0, x)})};
}

// ---- erfinv ----

std::vector<TensorType> infer_erfinv(InferCtx& c) {
  require_class(c, 0, kFloat);
  return std::vector<TensorType>{c.in[0]};
}

std::vector<ValueRef> expand_erfinv(Graph& g, const std::vector<ValueRef>& in, const Attrs&) {
  return std::vector<ValueRef>{erfinv_of(g, in[0])};
}


// ---- random_normal / random_normal_like ----

// Box-Muller on two Philox uniforms shaped like `like`, scaled to the node's mean and deviation.
ValueRef normal_of(Graph& g, ValueRef like, DType dtype, const Attrs& a) {
  // u1 in (0, 1] so the log is finite
  ValueRef u0 = uniform_like(g, like, dtype, seed_of(a, 0));
  ValueRef u1 = bin(g, "subtraction", k(g, 1, u0), u0);
  ValueRef u2 = uniform_like(g, like, dtype, seed_of(a, 1));
  ValueRef r = un(g, "square_root", bin(g, "multiplication", k(g, -2, u1), un(g, "logarithm", u1)));
  ValueRef z = bin(g, "multiplication", r, un(g, "cos", bin(g, "multiplication", k(g, 6.283185307179586, u2), u2)));
  double mean = std::get<double>(a.at("mean")), sd = std::get<double>(a.at("standard_deviation"));
  return bin(g, "addition", bin(g, "multiplication", z, k(g, sd, z)), k(g, mean, z));
}

std::vector<ValueRef> expand_random_normal(Graph& g, const std::vector<ValueRef>&, const Attrs& a) {
  return std::vector<ValueRef>{normal_of(g, shape_source(g, a), dtype_of(a), a)};
}

std::vector<ValueRef> expand_random_normal_like(Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
  DType d = a.count("dtype") ? std::get<DType>(a.at("dtype")) : g.type(in[0]).dtype;
  return std::vector<ValueRef>{normal_of(g, in[0], d, a)};
}
}  // namespace

void register_random_ops() {
  register_op({.name = "random_uniform_like",
               .doc = "Uniform numbers in [0, 1) shaped like `like` (Philox-4x32-10 keyed by seed; each run of an "
                      "executable advances the counter, so runs draw fresh numbers).",
               .inputs = {{"like", false, false, InputRole::ShapeOnly}},
               .attrs = {optional_attr("seed", AttrKind::Int, kSeedDoc), optional_attr("dtype", AttrKind::DType)},
               .decode = attr_decoder(decode_random_uniform),
               .infer = like_type,
               .grad = no_grad_through_randomness(),
               .stateful = true,
               .family = "random"});

  auto seed_attr = optional_attr("seed", AttrKind::Int, kSeedDoc);
  register_op({.name = "random_uniform",
               .doc = "Uniform numbers in [minimum, maximum).",
               .attrs = {attr("shape", AttrKind::Shape), seed_attr, attr("minimum", AttrKind::Float, 0.0),
                         attr("maximum", AttrKind::Float, 1.0), attr("dtype", AttrKind::DType, DType::Float32)},
               .infer = static_shape_type,
               .stateful = true,  // draws fresh numbers on every run
               .family = "random",
               .expand = expand_random_uniform});
  register_op({.name = "random_normal",
               .doc = "Normal numbers with the given mean and standard deviation (Box-Muller on Philox uniforms).",
               .attrs = {attr("shape", AttrKind::Shape), seed_attr, attr("mean", AttrKind::Float, 0.0),
                         attr("standard_deviation", AttrKind::Float, 1.0), attr("dtype", AttrKind::DType, DType::Float32)},
               .infer = static_shape_type,
               .stateful = true,  // draws fresh numbers on every run
               .family = "random",
               .expand = expand_random_normal});
  register_op({.name = "random_normal_like",
               .doc = "random_normal shaped like `like` (unknown dims allowed).",
               .inputs = {{"like"}},
               .attrs = {seed_attr, attr("mean", AttrKind::Float, 0.0), attr("standard_deviation", AttrKind::Float, 1.0),
                         optional_attr("dtype", AttrKind::DType)},
               .infer = like_type,
               .stateful = true,  // draws fresh numbers on every run
               .family = "random",
               .expand = expand_random_normal_like});
  register_op({.name = "random_truncated_normal",
               .doc = "Normal numbers truncated to mean +- 2 standard deviations (as MPSGraph and TensorFlow), by "
                      "inverting the normal CDF of a uniform draw restricted to that range.",
               .attrs = {attr("shape", AttrKind::Shape), seed_attr, attr("mean", AttrKind::Float, 0.0),
                         attr("standard_deviation", AttrKind::Float, 1.0), attr("dtype", AttrKind::DType, DType::Float32)},
               .infer = static_shape_type,
               .stateful = true,  // draws fresh numbers on every run
               .family = "random",
               .expand = expand_random_truncated_normal});
  register_op({.name = "random_bernoulli",
               .doc = "1 with probability p, else 0, in the given dtype.",
               .attrs = {attr("shape", AttrKind::Shape), attr("probability", AttrKind::Float, 0.5), seed_attr,
                         attr("dtype", AttrKind::DType, DType::Float32)},
               .infer = infer_random_bernoulli,
               .differentiable = Differentiable::No,
               .stateful = true,  // draws fresh numbers on every run
               .family = "random",
               .expand = expand_random_bernoulli});
  register_op({.name = "dropout",
               .doc = "Zeroes each element with probability rate and scales the rest by 1 / (1 - rate) (inverted "
                      "dropout); fresh masks on every run.",
               .inputs = {{"x"}},
               .attrs = {attr("rate", AttrKind::Float, 0.5), seed_attr},
               .infer = infer_dropout,
               // the mask depends only on shape, seed and run, so dropout of dy with the same
               // attributes applies the forward's mask (and draws nothing new to keep)
               .grad = grad_dropout,
               .stateful = true,  // draws fresh numbers on every run
               .family = "random",
               .expand = expand_dropout});
  register_op({.name = "erfinv",
               .doc = "Inverse error function (Giles' single-precision approximation, about 1e-7 relative; "
                      "+-1 give +-inf).",
               .inputs = {{"x"}},
               .infer = infer_erfinv,
               .family = "elementwise",
               .expand = expand_erfinv});
}

}  // namespace mg::ops
