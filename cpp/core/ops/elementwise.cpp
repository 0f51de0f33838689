// Elementwise family: unary, binary (numpy broadcasting), select, clamp, cast.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/ops/common.h"

namespace mg::ops {

namespace {

// Builder shorthands for gradient rules (public ops only, so rules differentiate again).
struct RuleBuilder {
  Graph& g;
  ValueRef op(const char* name, std::vector<ValueRef> in, Attrs a = {}) { return call(g, name, in, std::move(a)); }
  ValueRef add(ValueRef a, ValueRef b) { return op("addition", {a, b}); }
  ValueRef sub(ValueRef a, ValueRef b) { return op("subtraction", {a, b}); }
  ValueRef mul(ValueRef a, ValueRef b) { return op("multiplication", {a, b}); }
  ValueRef div(ValueRef a, ValueRef b) { return op("division", {a, b}); }
  ValueRef neg(ValueRef a) { return op("negative", {a}); }
  ValueRef k(double v, ValueRef like) { return scalar_like(g, v, like); }
  ValueRef select(ValueRef p, ValueRef a, ValueRef b) { return op("select", {p, a, b}); }
  ValueRef zero_where_not(ValueRef p, ValueRef a) { return select(p, a, k(0, a)); }
  // conj(a) for complex a, else a itself: gradients follow PyTorch's convention (the gradient
  // of a real loss L at z = x + iy is dL/dx + i dL/dy), so a holomorphic f passes dy * conj(f'(z)).
  ValueRef cj(ValueRef a) { return is_complex(g.type(a).dtype) ? op("conjugate", {a}) : a; }
};

using Rule1 = std::function<ValueRef(RuleBuilder&, ValueRef x, ValueRef y, ValueRef dy)>;
using Rule2 = std::function<std::pair<ValueRef, ValueRef>(RuleBuilder&, ValueRef x, ValueRef y, ValueRef z, ValueRef dz)>;

struct UnarySpec {
  const char* name;
  unsigned accepts;
  bool to_bool;  // output dtype is bool
  std::vector<std::string> aliases;
  const char* doc;
  Rule1 grad = nullptr;  // null: not differentiable
  bool real_of_complex = false;  // a complex input gives its real part dtype (absolute)
};

struct BinarySpec {
  const char* name;
  unsigned accepts;
  bool to_bool;
  std::vector<std::string> aliases;
  const char* doc;
  Rule2 grad = nullptr;  // gradients before summing back broadcast dims
};

std::vector<TensorType> infer_unary(InferCtx& c, unsigned cls, bool to_bool, bool real_of_complex) {
  require_class(c, 0, cls);
  DType out = to_bool ? DType::Bool : real_of_complex ? complex_part_dtype(c.in[0].dtype) : c.in[0].dtype;
  return std::vector<TensorType>{{out, c.in[0].shape}};
}

std::vector<TensorType> infer_binary(InferCtx& c, unsigned cls, bool to_bool) {
  c.same_dtype(0, 1);
  require_class(c, 0, cls);
  return std::vector<TensorType>{{to_bool ? DType::Bool : c.in[0].dtype, c.broadcast({0, 1})}};
}

void unary(const UnarySpec& s) {
  unsigned cls = s.accepts;
  bool to_bool = s.to_bool, real_of_complex = s.real_of_complex;
  GradFn grad;
  if (s.grad)
    grad = [rule = s.grad](GradCtx& c) {
      RuleBuilder b{c.g};
      return std::vector<ValueRef>{rule(b, c.x(0), c.y(0), c.dy[0])};
    };
  register_op({.name = s.name,
               .doc = s.doc,
               .inputs = {{"x"}},
               .infer = [cls, to_bool, real_of_complex](InferCtx& c) { return infer_unary(c, cls, to_bool, real_of_complex); },
               .grad = grad,
               .differentiable = s.grad ? Differentiable::Yes : Differentiable::No,
               .aliases = s.aliases,
               .family = "elementwise",
               .complex = (cls & kComplex) != 0,
               .per_sample = per_sample_broadcast});
}

void binary(const BinarySpec& s) {
  unsigned cls = s.accepts;
  bool to_bool = s.to_bool;
  GradFn grad;
  if (s.grad)
    grad = [rule = s.grad](GradCtx& c) {
      RuleBuilder b{c.g};
      auto [dx, dy] = rule(b, c.x(0), c.x(1), c.y(0), c.dy[0]);
      return std::vector<ValueRef>{dx.valid() ? sum_to_like(c.g, dx, c.x(0)) : dx,
                                   dy.valid() ? sum_to_like(c.g, dy, c.x(1)) : dy};
    };
  register_op({.name = s.name,
               .doc = std::string(s.doc) + " Broadcasts like numpy; both inputs must have the same dtype.",
               .inputs = {{"x"}, {"y"}},
               .infer = [cls, to_bool](InferCtx& c) { return infer_binary(c, cls, to_bool); },
               .grad = grad,
               .differentiable = s.grad ? Differentiable::Yes : Differentiable::No,
               .aliases = s.aliases,
               .family = "elementwise",
               .complex = (cls & kComplex) != 0,
               .per_sample = per_sample_broadcast});
}


// ---- select ----

std::vector<TensorType> infer_select(InferCtx& c) {
  c.same_dtype(1, 2);
  return std::vector<TensorType>{{c.in[1].dtype, c.broadcast({0, 1, 2})}};
}

std::vector<ValueRef> grad_select(GradCtx& c) {
  RuleBuilder b{c.g};
  ValueRef p = c.x(0), dy = c.dy[0], zero = b.k(0, dy);
  return std::vector<ValueRef>{ValueRef{}, sum_to_like(c.g, b.select(p, dy, zero), c.x(1)),
                               sum_to_like(c.g, b.select(p, zero, dy), c.x(2))};
}

// ---- clamp ----

std::vector<TensorType> infer_clamp(InferCtx& c) {
  c.same_dtype(0, 1);
  c.same_dtype(0, 2);
  require_class(c, 0, kNumeric);
  return std::vector<TensorType>{{c.in[0].dtype, c.broadcast({0, 1, 2})}};
}

std::vector<ValueRef> grad_clamp(GradCtx& c) {
  RuleBuilder b{c.g};
  ValueRef x = c.x(0), lo = c.x(1), hi = c.x(2), dy = c.dy[0];
  ValueRef below = b.op("less_than", {x, lo}), above = b.op("greater_than", {x, hi});
  ValueRef inside = b.op("logical_not", {b.op("logical_or", {below, above})});
  return std::vector<ValueRef>{sum_to_like(c.g, b.zero_where_not(inside, dy), x),
                               sum_to_like(c.g, b.zero_where_not(below, dy), lo),
                               sum_to_like(c.g, b.zero_where_not(above, dy), hi)};
}

// ---- cast ----

std::vector<TensorType> infer_cast(InferCtx& c) {
  return std::vector<TensorType>{{c.dtype("dtype"), c.in[0].shape}};
}

std::vector<ValueRef> grad_cast(GradCtx& c) {
  DType from = c.g.type(c.x(0)).dtype;
  // complex -> real keeps the real part, real -> complex sets it: casting dy back is the gradient
  if (!is_inexact(from) || !is_inexact(c.g.type(c.dy[0]).dtype)) return std::vector<ValueRef>{ValueRef{}};
  return std::vector<ValueRef>{call(c.g, "cast", {c.dy[0]}, {{"dtype", from}})};
}

}  // namespace

void register_elementwise_ops() {
  const unsigned F = kFloat, N = kNumeric, A = kAny, I = kInt, IB = kInt | kBool, B = kBool, C = kComplex;
  const std::vector<UnarySpec> unaries = {
      {"identity", A | C, false, {}, "Returns its input.",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef dy) -> ValueRef { return dy; }},
      {"negative", N | C, false, {"neg"}, "-x. Integers wrap around (two's complement).",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef dy) -> ValueRef { return b.neg(dy); }},
      {"absolute", N | C, false, {"abs"},
       "|x|. abs of the most negative integer is itself, as in numpy; a complex x gives its real modulus.",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef dy) -> ValueRef {
         if (!is_complex(b.g.type(x).dtype)) return b.mul(dy, b.op("sign", {x}));
         // dy * x / |x|, and 0 at x == 0
         ValueRef safe = b.select(b.op("equal", {y, b.k(0, y)}), b.k(1, y), y);
         return b.mul(b.op("complex", {b.div(dy, safe), zeros_like(b.g, dy)}), x);
       },
       true},
      {"sign", N, false, {}, "-1, 0 or 1 (NaN stays NaN; -0.0 gives -0.0).",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef dy) -> ValueRef { return zeros_like(b.g, x); }},
      {"floor", N, false, {}, "Largest integer not greater than x (identity on integers).",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef dy) -> ValueRef { return zeros_like(b.g, x); }},
      {"ceil", N, false, {}, "Smallest integer not less than x (identity on integers).",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef dy) -> ValueRef { return zeros_like(b.g, x); }},
      {"round", N, false, {"rint"}, "Rounds to the nearest integer, halves to even (identity on integers).",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef dy) -> ValueRef { return zeros_like(b.g, x); }},
      {"truncate", N, false, {"trunc"}, "Rounds toward zero (identity on integers).",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef dy) -> ValueRef { return zeros_like(b.g, x); }},
      {"exponent", F | C, false, {"exp"}, "e**x.",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef dy) -> ValueRef { return b.mul(dy, b.cj(y)); }},
      {"exponent_base2", F, false, {"exp2"}, "2**x.",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef dy) -> ValueRef { return b.mul(b.mul(dy, y), b.k(0.69314718055994530942, x)); }},
      {"exponent_base10", F, false, {"exp10"}, "10**x.",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef dy) -> ValueRef { return b.mul(b.mul(dy, y), b.k(2.30258509299404568402, x)); }},
      {"logarithm", F, false, {"log"}, "Natural logarithm; log(0) = -inf, log(x<0) = nan.",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef dy) -> ValueRef { return b.div(dy, x); }},
      {"log1p", F, false, {}, "log(1 + x), accurate for small x.",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef dy) -> ValueRef { return b.div(dy, b.add(x, b.k(1, x))); }},
      {"expm1", F, false, {}, "exp(x) - 1, accurate for small x.",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef dy) -> ValueRef { return b.mul(dy, b.add(y, b.k(1, x))); }},
      {"logarithm_base2", F, false, {"log2"}, "Base-2 logarithm.",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef dy) -> ValueRef { return b.div(dy, b.mul(x, b.k(0.69314718055994530942, x))); }},
      {"logarithm_base10", F, false, {"log10"}, "Base-10 logarithm.",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef dy) -> ValueRef { return b.div(dy, b.mul(x, b.k(2.30258509299404568402, x))); }},
      {"square", N | C, false, {}, "x*x.",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef dy) -> ValueRef { return b.mul(dy, b.cj(b.mul(x, b.k(2, x)))); }},
      {"square_root", F, false, {"sqrt"}, "Square root; sqrt(x<0) = nan.",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef dy) -> ValueRef { return b.div(b.mul(dy, b.k(0.5, x)), y); }},
      {"reverse_square_root", F, false, {"rsqrt"}, "1/sqrt(x).",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef dy) -> ValueRef { return b.mul(b.mul(dy, b.k(-0.5, x)), b.mul(y, b.mul(y, y))); }},
      {"reciprocal", F | C, false, {}, "1/x.",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef dy) -> ValueRef { return b.neg(b.mul(dy, b.cj(b.mul(y, y)))); }},
      {"sin", F, false, {}, "Sine.",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef dy) -> ValueRef { return b.mul(dy, b.op("cos", {x})); }},
      {"cos", F, false, {}, "Cosine.",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef dy) -> ValueRef { return b.neg(b.mul(dy, b.op("sin", {x}))); }},
      {"tan", F, false, {}, "Tangent.",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef dy) -> ValueRef { return b.mul(dy, b.add(b.k(1, x), b.mul(y, y))); }},
      {"sinh", F, false, {}, "Hyperbolic sine.",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef dy) -> ValueRef { return b.mul(dy, b.op("cosh", {x})); }},
      {"cosh", F, false, {}, "Hyperbolic cosine.",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef dy) -> ValueRef { return b.mul(dy, b.op("sinh", {x})); }},
      {"tanh", F, false, {}, "Hyperbolic tangent.",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef dy) -> ValueRef { return b.mul(dy, b.sub(b.k(1, x), b.mul(y, y))); }},
      {"asin", F, false, {"arcsin"}, "Inverse sine.",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef dy) -> ValueRef { return b.div(dy, b.op("square_root", {b.sub(b.k(1, x), b.mul(x, x))})); }},
      {"acos", F, false, {"arccos"}, "Inverse cosine.",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef dy) -> ValueRef { return b.neg(b.div(dy, b.op("square_root", {b.sub(b.k(1, x), b.mul(x, x))}))); }},
      {"atan", F, false, {"arctan"}, "Inverse tangent.",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef dy) -> ValueRef { return b.div(dy, b.add(b.k(1, x), b.mul(x, x))); }},
      {"asinh", F, false, {"arcsinh"}, "Inverse hyperbolic sine.",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef dy) -> ValueRef { return b.div(dy, b.op("square_root", {b.add(b.mul(x, x), b.k(1, x))})); }},
      {"acosh", F, false, {"arccosh"}, "Inverse hyperbolic cosine.",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef dy) -> ValueRef { return b.div(dy, b.op("square_root", {b.sub(b.mul(x, x), b.k(1, x))})); }},
      {"atanh", F, false, {"arctanh"}, "Inverse hyperbolic tangent.",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef dy) -> ValueRef { return b.div(dy, b.sub(b.k(1, x), b.mul(x, x))); }},
      {"erf", F, false, {}, "Gauss error function.",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef dy) -> ValueRef { return b.mul(dy, b.mul(b.k(1.12837916709551257390, x), b.op("exponent", {b.neg(b.mul(x, x))}))); }},
      {"sigmoid", F, false, {}, "1/(1+exp(-x)).",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef dy) -> ValueRef { return b.mul(dy, b.mul(y, b.sub(b.k(1, x), y))); }},
      {"relu", N, false, {}, "max(x, 0); NaN stays NaN.",
       // y > 0 exactly where x > 0; testing the output leaves x with one reader, so x's producer fuses with relu
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef dy) -> ValueRef { return b.zero_where_not(b.op("greater_than", {y, b.k(0, y)}), dy); }},
      {"logical_not", B, false, {"not_"}, "Logical negation of a bool tensor."},
      {"isnan", N, true, {}, "True where x is NaN (always False for integers)."},
      {"isinf", N, true, {}, "True where x is +-inf (always False for integers)."},
      {"isfinite", N, true, {}, "True where x is neither NaN nor inf (always True for integers)."},
      {"bitwise_not", IB, false, {"invert"}, "Bitwise complement (logical not on bool)."},
  };
  for (auto& u : unaries) unary(u);

  const std::vector<BinarySpec> binaries = {
      {"addition", N | C, false, {"add"}, "x + y. Integers wrap around.",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef z, ValueRef dz) -> std::pair<ValueRef, ValueRef> {
        return {dz, dz};
      }},
      {"subtraction", N | C, false, {"subtract"}, "x - y. Integers wrap around.",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef z, ValueRef dz) -> std::pair<ValueRef, ValueRef> {
        return {dz, b.neg(dz)};
      }},
      {"multiplication", N | C, false, {"multiply"}, "x * y. Integers wrap around.",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef z, ValueRef dz) -> std::pair<ValueRef, ValueRef> {
        return {b.mul(dz, b.cj(y)), b.mul(dz, b.cj(x))};
      }},
      {"division", N | C, false, {"divide"},
       "x / y. Integer division truncates toward zero as in C and MPSGraph; integer division by zero gives 0.",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef z, ValueRef dz) -> std::pair<ValueRef, ValueRef> {
        return {b.div(dz, b.cj(y)), b.neg(b.div(b.mul(dz, b.cj(z)), b.cj(y)))};
      }},
      {"floor_division", N, false, {"floor_divide"},
       "floor(x / y) as numpy's floor_divide; integer division by zero gives 0.",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef z, ValueRef dz) -> std::pair<ValueRef, ValueRef> {
        return {zeros_like(b.g, z), zeros_like(b.g, z)};
      }},
      {"modulo", N, false, {"mod", "remainder"},
       "x mod y with the sign of y, as numpy's mod; integer modulo by zero gives 0, float gives nan.",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef z, ValueRef dz) -> std::pair<ValueRef, ValueRef> {
        return {dz, b.neg(b.mul(dz, b.op("floor_division", {x, y})))};
      }},
      {"power", N, false, {"pow"},
       "x ** y. Integer powers wrap around; a negative integer exponent gives 1/x**-y truncated (0 unless |x| == 1).",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef z, ValueRef dz) -> std::pair<ValueRef, ValueRef> {
        auto safe_x = b.select(b.op("equal", {x, b.k(0, x)}), b.k(1, x), x);  // d/dy at x == 0 is 0, not nan
        return {b.mul(dz, b.mul(y, b.op("power", {x, b.sub(y, b.k(1, y))}))),
                b.mul(dz, b.mul(z, b.op("logarithm", {safe_x})))};
      }},
      {"maximum", N, false, {}, "Elementwise maximum; NaN propagates.",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef z, ValueRef dz) -> std::pair<ValueRef, ValueRef> {
        auto w = b.select(b.op("greater_than", {x, y}), b.k(1, x),
                          b.select(b.op("equal", {x, y}), b.k(0.5, x), b.k(0, x)));  // ties share
        return {b.mul(dz, w), b.mul(dz, b.sub(b.k(1, x), w))};
      }},
      {"minimum", N, false, {}, "Elementwise minimum; NaN propagates.",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef z, ValueRef dz) -> std::pair<ValueRef, ValueRef> {
        auto w = b.select(b.op("less_than", {x, y}), b.k(1, x),
                          b.select(b.op("equal", {x, y}), b.k(0.5, x), b.k(0, x)));
        return {b.mul(dz, w), b.mul(dz, b.sub(b.k(1, x), w))};
      }},
      {"atan2", F, false, {"arctan2"}, "Four-quadrant arctan(x / y), as numpy's arctan2(x, y).",
       [](RuleBuilder& b, ValueRef x, ValueRef y, ValueRef z, ValueRef dz) -> std::pair<ValueRef, ValueRef> {
        auto r2 = b.add(b.mul(x, x), b.mul(y, y));
        return {b.div(b.mul(dz, y), r2), b.neg(b.div(b.mul(dz, x), r2))};
      }},
      {"equal", A | C, true, {}, "x == y."},
      {"not_equal", A | C, true, {}, "x != y."},
      {"less_than", A, true, {"less"}, "x < y."},
      {"less_than_or_equal_to", A, true, {"less_equal"}, "x <= y."},
      {"greater_than", A, true, {"greater"}, "x > y."},
      {"greater_than_or_equal_to", A, true, {"greater_equal"}, "x >= y."},
      {"logical_and", B, false, {}, "Logical and of bool tensors."},
      {"logical_or", B, false, {}, "Logical or of bool tensors."},
      {"logical_xor", B, false, {}, "Logical xor of bool tensors."},
      {"bitwise_and", IB, false, {}, "Bitwise and."},
      {"bitwise_or", IB, false, {}, "Bitwise or."},
      {"bitwise_xor", IB, false, {}, "Bitwise xor."},
      {"bitwise_left_shift", I, false, {"left_shift"},
       "x << y. Shifts by a negative amount or by at least the bit width give 0."},
      {"bitwise_right_shift", I, false, {"right_shift"},
       "x >> y, arithmetic for signed types. Shifts by at least the bit width give 0 or -1 (sign fill); negative amounts give 0."},
  };
  for (auto& b : binaries) binary(b);

  register_op({.name = "select",
               .doc = "predicate ? x : y, broadcasting all three. The predicate is bool, or nonzero means true.",
               .inputs = {{"predicate", false, false, InputRole::Predicate}, {"true_tensor"}, {"false_tensor"}},
               .infer = infer_select,
               .grad = grad_select,
               .aliases = {"where"},
               .family = "elementwise",
               .per_sample = per_sample_broadcast});
  register_op({.name = "clamp",
               .doc = "min(max(x, min_value), max_value), broadcasting all three; all share one dtype.",
               .inputs = {{"x"}, {"min_value"}, {"max_value"}},
               .infer = infer_clamp,
               .grad = grad_clamp,
               .aliases = {"clip"},
               .family = "elementwise",
               .per_sample = per_sample_broadcast});
  register_op({.name = "cast",
               .doc = "Converts to another dtype. Float to integer truncates toward zero and saturates at the "
                      "integer's range; NaN becomes 0. Anything nonzero becomes True.",
               .inputs = {{"x"}},
               .attrs = {attr("dtype", AttrKind::DType)},
               .infer = infer_cast,
               .grad = grad_cast,
               .aliases = {"astype"},
               .family = "elementwise",
               .per_sample = per_sample_broadcast});
}

}  // namespace mg::ops
