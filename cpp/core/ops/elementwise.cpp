// Elementwise family: unary, binary (numpy broadcasting), select, clamp, cast.
#include "core/ops/common.h"

namespace mg::ops {

namespace {

struct UnarySpec {
  const char* name;
  unsigned accepts;
  bool to_bool;  // output dtype is bool
  std::vector<std::string> aliases;
  const char* doc;
};

struct BinarySpec {
  const char* name;
  unsigned accepts;
  bool to_bool;
  std::vector<std::string> aliases;
  const char* doc;
};

void unary(const UnarySpec& s) {
  unsigned cls = s.accepts;
  bool to_bool = s.to_bool;
  register_op({.name = s.name,
               .doc = s.doc,
               .inputs = {{"x"}},
               .infer = [cls, to_bool](InferCtx& c) {
                 require_class(c, 0, cls);
                 return std::vector<TensorType>{{to_bool ? DType::Bool : c.in[0].dtype, c.in[0].shape}};
               },
               .aliases = s.aliases,
               .family = "elementwise"});
}

void binary(const BinarySpec& s) {
  unsigned cls = s.accepts;
  bool to_bool = s.to_bool;
  register_op({.name = s.name,
               .doc = std::string(s.doc) + " Broadcasts like numpy; both inputs must have the same dtype.",
               .inputs = {{"x"}, {"y"}},
               .infer = [cls, to_bool](InferCtx& c) {
                 c.same_dtype(0, 1);
                 require_class(c, 0, cls);
                 return std::vector<TensorType>{{to_bool ? DType::Bool : c.in[0].dtype, c.broadcast({0, 1})}};
               },
               .aliases = s.aliases,
               .family = "elementwise"});
}

}  // namespace

void register_elementwise_ops() {
  const unsigned F = kFloat, N = kNumeric, A = kAny, I = kInt, IB = kInt | kBool, B = kBool;
  const std::vector<UnarySpec> unaries = {
      {"identity", A, false, {}, "Returns its input."},
      {"negative", N, false, {"neg"}, "-x. Integers wrap around (two's complement)."},
      {"absolute", N, false, {"abs"}, "|x|. abs of the most negative integer is itself, as in numpy."},
      {"sign", N, false, {}, "-1, 0 or 1 (NaN stays NaN; -0.0 gives -0.0)."},
      {"floor", N, false, {}, "Largest integer not greater than x (identity on integers)."},
      {"ceil", N, false, {}, "Smallest integer not less than x (identity on integers)."},
      {"round", N, false, {"rint"}, "Rounds to the nearest integer, halves to even (identity on integers)."},
      {"truncate", N, false, {"trunc"}, "Rounds toward zero (identity on integers)."},
      {"exponent", F, false, {"exp"}, "e**x."},
      {"exponent_base2", F, false, {"exp2"}, "2**x."},
      {"exponent_base10", F, false, {"exp10"}, "10**x."},
      {"logarithm", F, false, {"log"}, "Natural logarithm; log(0) = -inf, log(x<0) = nan."},
      {"logarithm_base2", F, false, {"log2"}, "Base-2 logarithm."},
      {"logarithm_base10", F, false, {"log10"}, "Base-10 logarithm."},
      {"square", N, false, {}, "x*x."},
      {"square_root", F, false, {"sqrt"}, "Square root; sqrt(x<0) = nan."},
      {"reverse_square_root", F, false, {"rsqrt"}, "1/sqrt(x)."},
      {"reciprocal", F, false, {}, "1/x."},
      {"sin", F, false, {}, "Sine."},
      {"cos", F, false, {}, "Cosine."},
      {"tan", F, false, {}, "Tangent."},
      {"sinh", F, false, {}, "Hyperbolic sine."},
      {"cosh", F, false, {}, "Hyperbolic cosine."},
      {"tanh", F, false, {}, "Hyperbolic tangent."},
      {"asin", F, false, {"arcsin"}, "Inverse sine."},
      {"acos", F, false, {"arccos"}, "Inverse cosine."},
      {"atan", F, false, {"arctan"}, "Inverse tangent."},
      {"asinh", F, false, {"arcsinh"}, "Inverse hyperbolic sine."},
      {"acosh", F, false, {"arccosh"}, "Inverse hyperbolic cosine."},
      {"atanh", F, false, {"arctanh"}, "Inverse hyperbolic tangent."},
      {"erf", F, false, {}, "Gauss error function."},
      {"sigmoid", F, false, {}, "1/(1+exp(-x))."},
      {"relu", N, false, {}, "max(x, 0); NaN stays NaN."},
      {"logical_not", B, false, {"not_"}, "Logical negation of a bool tensor."},
      {"isnan", N, true, {}, "True where x is NaN (always False for integers)."},
      {"isinf", N, true, {}, "True where x is +-inf (always False for integers)."},
      {"isfinite", N, true, {}, "True where x is neither NaN nor inf (always True for integers)."},
      {"bitwise_not", IB, false, {"invert"}, "Bitwise complement (logical not on bool)."},
  };
  for (auto& u : unaries) unary(u);

  const std::vector<BinarySpec> binaries = {
      {"addition", N, false, {"add"}, "x + y. Integers wrap around."},
      {"subtraction", N, false, {"subtract"}, "x - y. Integers wrap around."},
      {"multiplication", N, false, {"multiply"}, "x * y. Integers wrap around."},
      {"division", N, false, {"divide"},
       "x / y. Integer division truncates toward zero as in C and MPSGraph; integer division by zero gives 0."},
      {"floor_division", N, false, {"floor_divide"},
       "floor(x / y) as numpy's floor_divide; integer division by zero gives 0."},
      {"modulo", N, false, {"mod", "remainder"},
       "x mod y with the sign of y, as numpy's mod; integer modulo by zero gives 0, float gives nan."},
      {"power", N, false, {"pow"},
       "x ** y. Integer powers wrap around; a negative integer exponent gives 1/x**-y truncated (0 unless |x| == 1)."},
      {"maximum", N, false, {}, "Elementwise maximum; NaN propagates."},
      {"minimum", N, false, {}, "Elementwise minimum; NaN propagates."},
      {"atan2", F, false, {"arctan2"}, "Four-quadrant arctan(x / y), as numpy's arctan2(x, y)."},
      {"equal", A, true, {}, "x == y."},
      {"not_equal", A, true, {}, "x != y."},
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
               .inputs = {{"predicate"}, {"true_tensor"}, {"false_tensor"}},
               .infer = [](InferCtx& c) {
                 c.same_dtype(1, 2);
                 return std::vector<TensorType>{{c.in[1].dtype, c.broadcast({0, 1, 2})}};
               },
               .aliases = {"where"},
               .family = "elementwise"});
  register_op({.name = "clamp",
               .doc = "min(max(x, min_value), max_value), broadcasting all three; all share one dtype.",
               .inputs = {{"x"}, {"min_value"}, {"max_value"}},
               .infer = [](InferCtx& c) {
                 c.same_dtype(0, 1);
                 c.same_dtype(0, 2);
                 require_class(c, 0, kNumeric);
                 return std::vector<TensorType>{{c.in[0].dtype, c.broadcast({0, 1, 2})}};
               },
               .aliases = {"clip"},
               .family = "elementwise"});
  register_op({.name = "cast",
               .doc = "Converts to another dtype. Float to integer truncates toward zero and saturates at the "
                      "integer's range; NaN becomes 0. Anything nonzero becomes True.",
               .inputs = {{"x"}},
               .attrs = {attr("dtype", AttrKind::DType)},
               .infer = [](InferCtx& c) { return std::vector<TensorType>{{c.dtype("dtype"), c.in[0].shape}}; },
               .aliases = {"astype"},
               .family = "elementwise"});
}

}  // namespace mg::ops
