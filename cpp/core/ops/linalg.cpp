// Linear algebra on the last two dims, batched over the leading ones: matrix_inverse (MPSGraph's
// inverseOfTensor:), solve, cholesky, triangular_solve, determinant and log_determinant, with
// numpy.linalg / torch.linalg semantics. Floating-point dtypes only; the CPU runs LAPACK (float16
// and bfloat16 through float32). A singular matrix never raises: inverse and solve give NaN where
// the LU factorisation hits an exact zero pivot (near-singular ones give LAPACK's large values, as
// numpy), determinant 0, log_determinant (0, -inf), cholesky of a matrix that is not positive
// definite NaN (as JAX; numpy and torch raise).
//
// cholesky, triangular_solve, determinant and log_determinant are composites: the CPU runs its
// LAPACK kernels, other backends (Metal, CUDA) their decompositions, unrolled up to 128 x 128.
//
// Gradients are written with these ops, matrix_multiplication and band_part, so second order works.
// Ops that read only a triangle of a matrix (cholesky, triangular_solve) have gradients confined to
// that triangle: the exact derivative of what they compute.
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/array.h"
#include "core/ops/common.h"
#include "core/ops/linalg_attrs.h"

namespace mg::ops {

namespace {

// ---- typed attributes (linalg_attrs.h) ----

CholeskyAttrs decode_cholesky(const Attrs& a) { return {get_attr<bool>(a, "upper")}; }
TriangularSolveAttrs decode_triangular_solve(const Attrs& a) {
  return {get_attr<bool>(a, "upper"), get_attr<bool>(a, "left"), get_attr<bool>(a, "unit_diagonal")};
}

// ---- inference ----

// Input i is a batch of square matrices (..., n, n) of a floating-point dtype.
void square_matrices(const InferCtx& c, size_t i, const char* what) {
  require_class(c, i, kFloat);
  const Shape& s = c.in[i].shape;
  if (s.size() < 2)
    c.fail(ErrorKind::Value, std::string("'") + what + "' must be a batch of matrices (rank >= 2), got " +
                                 type_str(c.in[i]));
  int64_t r = s[s.size() - 2], k = s.back();
  if (r >= 0 && k >= 0 && r != k)
    c.fail(ErrorKind::Value, std::string("'") + what + "' must hold square matrices, got " + type_str(c.in[i]));
}

Shape batch_of(const Shape& s, size_t matrix_rank) { return Shape(s.begin(), s.end() - int64_t(matrix_rank)); }

// The output of A (..., n, n) combined with B: a matrix (..., n, k) (or (..., k, n) when B is on
// the right) with broadcast batch dims, or, with `vector_ok`, a vector (n,) as numpy.linalg.solve.
Shape solve_shape(const InferCtx& c, bool vector_ok, bool left) {
  const Shape& as = c.in[0].shape;
  const Shape& bs = c.in[1].shape;
  const int64_t n = as.back();
  if (vector_ok && bs.size() == 1) {
    if (n >= 0 && bs[0] >= 0 && bs[0] != n)
      c.fail(ErrorKind::Value, "'b' has " + std::to_string(bs[0]) + " elements but 'a' is " + shape_str(as));
    Shape out = batch_of(as, 2);
    out.push_back(n >= 0 ? n : bs[0]);
    return out;
  }
  if (bs.size() < 2)
    c.fail(ErrorKind::Value, std::string("'b' must be a batch of matrices (rank >= 2") + (vector_ok ? ") or a vector" : ")") +
                                 ", got " + type_str(c.in[1]) + " with 'a' " + type_str(c.in[0]));
  const int64_t bn = left ? bs[bs.size() - 2] : bs.back();
  if (n >= 0 && bn >= 0 && bn != n)
    c.fail(ErrorKind::Value, std::string("the ") + (left ? "rows" : "columns") + " of 'b' " + shape_str(bs) +
                                 " do not match 'a' " + shape_str(as));
  auto batch = broadcast_shapes(batch_of(as, 2), batch_of(bs, 2));
  if (!batch)
    c.fail(ErrorKind::Value, "batch dimensions do not broadcast: 'a' " + shape_str(as) + ", 'b' " + shape_str(bs));
  Shape out = *batch;
  const int64_t rows = left ? (n >= 0 ? n : bn) : bs[bs.size() - 2];
  const int64_t cols = left ? bs.back() : (n >= 0 ? n : bn);
  out.push_back(rows);
  out.push_back(cols);
  return out;
}

std::vector<TensorType> infer_square(InferCtx& c) {
  square_matrices(c, 0, "x");
  return {c.in[0]};
}

std::vector<TensorType> infer_solve(InferCtx& c) {
  square_matrices(c, 0, "a");
  c.same_dtype(0, 1);
  return {{c.in[0].dtype, solve_shape(c, true, true)}};
}

std::vector<TensorType> infer_triangular_solve(InferCtx& c) {
  square_matrices(c, 0, "a");
  c.same_dtype(0, 1);
  return {{c.in[0].dtype, solve_shape(c, false, c.b("left"))}};
}

std::vector<TensorType> infer_determinant(InferCtx& c) {
  square_matrices(c, 0, "x");
  return {{c.in[0].dtype, batch_of(c.in[0].shape, 2)}};
}

std::vector<TensorType> infer_log_determinant(InferCtx& c) {
  square_matrices(c, 0, "x");
  TensorType t{c.in[0].dtype, batch_of(c.in[0].shape, 2)};
  return {t, t};
}

// ---- gradient helpers ----

ValueRef mt(Graph& g, ValueRef v) { return call(g, "swap_axes", {v}, {{"axis1", int64_t(-2)}, {"axis2", int64_t(-1)}}); }
ValueRef mm(Graph& g, ValueRef a, ValueRef b) { return call(g, "matrix_multiplication", {a, b}); }
ValueRef band(Graph& g, ValueRef v, int64_t lower, int64_t upper) {
  return call(g, "band_part", {v}, {{"num_lower", lower}, {"num_upper", upper}});
}
ValueRef unsqueeze(Graph& g, ValueRef v, int64_t axis) {
  return call(g, "expand_dims", {v}, {{"axes", std::vector<int64_t>{axis}}});
}
ValueRef tri_solve(Graph& g, ValueRef a, ValueRef b, bool upper, bool left, bool unit) {
  return call(g, "triangular_solve", {a, b}, {{"upper", upper}, {"left", left}, {"unit_diagonal", unit}});
}
// The part of a gradient that the op reads: the triangle of A (without the diagonal if unit).
ValueRef triangle(Graph& g, ValueRef v, bool upper, bool unit) {
  ValueRef t = upper ? band(g, v, 0, -1) : band(g, v, -1, 0);
  return unit ? bin(g, "subtraction", t, band(g, v, 0, 0)) : t;
}

// ---- gradients ----

// Y = A^-1: dA = -Y^T dY Y^T.
std::vector<ValueRef> grad_matrix_inverse(GradCtx& c) {
  if (!c.dy[0].valid()) return {ValueRef{}};
  Graph& g = c.g;
  ValueRef yt = mt(g, c.y());
  return {un(g, "negative", mm(g, mm(g, yt, c.dy[0]), yt))};
}

// X = A^-1 B: dB = A^-T dX, dA = -dB X^T (batch broadcasting undone by sum_to_like).
std::vector<ValueRef> grad_solve(GradCtx& c) {
  if (!c.dy[0].valid()) return {ValueRef{}, ValueRef{}};
  Graph& g = c.g;
  ValueRef a = c.x(0), b = c.x(1), x = c.y();
  ValueRef gb = call(g, "solve", {mt(g, a), c.dy[0]});
  bool vec = g.type(b).shape.size() == 1;
  ValueRef ga = vec ? mm(g, unsqueeze(g, gb, -1), unsqueeze(g, x, -2)) : mm(g, gb, mt(g, x));
  return {sum_to_like(g, un(g, "negative", ga), a), sum_to_like(g, gb, b)};
}

// Left: X = A^-1 B, dB = A^-T dX, dA = -dB X^T. Right: X = B A^-1, dB = dX A^-T, dA = -X^T dB.
std::vector<ValueRef> grad_triangular_solve(GradCtx& c) {
  if (!c.dy[0].valid()) return {ValueRef{}, ValueRef{}};
  Graph& g = c.g;
  const TriangularSolveAttrs& t = typed_attrs<TriangularSolveAttrs>(c.node);
  ValueRef a = c.x(0), b = c.x(1), x = c.y();
  ValueRef gb = tri_solve(g, mt(g, a), c.dy[0], !t.upper, t.left, t.unit_diagonal);
  ValueRef ga = t.left ? mm(g, gb, mt(g, x)) : mm(g, mt(g, x), gb);
  ga = triangle(g, un(g, "negative", ga), t.upper, t.unit_diagonal);
  return {sum_to_like(g, ga, a), sum_to_like(g, gb, b)};
}

// A = L L^T. With T = tril(L^T dL) and X = (T + strict_tril(T)^T) / 2, H = L^-T X L^-1 satisfies
// <H, dA> = <dL, dL'> for symmetric dA (torch's cholesky_backward). The kernel reads one
// triangle of A, so the gradient folds H onto it: tril(H) + triu(H, 1)^T (upper: the mirror).
std::vector<ValueRef> grad_cholesky(GradCtx& c) {
  if (!c.dy[0].valid()) return {ValueRef{}};
  Graph& g = c.g;
  bool upper = typed_attrs<CholeskyAttrs>(c.node).upper;
  ValueRef l = upper ? mt(g, c.y()) : c.y();
  ValueRef gl = upper ? mt(g, c.dy[0]) : c.dy[0];
  ValueRef t = band(g, mm(g, mt(g, l), gl), -1, 0);
  ValueRef strict = bin(g, "subtraction", t, band(g, t, 0, 0));
  ValueRef x = bin(g, "multiplication", bin(g, "addition", t, mt(g, strict)), k(g, 0.5, t));
  ValueRef h = tri_solve(g, mt(g, l), x, true, true, false);
  h = tri_solve(g, l, h, false, false, false);
  ValueRef keep = upper ? band(g, h, 0, -1) : band(g, h, -1, 0);
  return {bin(g, "addition", keep, mt(g, bin(g, "subtraction", h, keep)))};
}

// d det(A) = det(A) tr(A^-1 dA): dA = dy det A^-T (NaN for a singular A).
std::vector<ValueRef> grad_determinant(GradCtx& c) {
  if (!c.dy[0].valid()) return {ValueRef{}};
  Graph& g = c.g;
  ValueRef s = bin(g, "multiplication", c.dy[0], c.y());
  s = unsqueeze(g, unsqueeze(g, s, -1), -1);
  return {bin(g, "multiplication", s, mt(g, un(g, "matrix_inverse", c.x(0))))};
}

// d log|det A| = tr(A^-1 dA); the sign is piecewise constant.
std::vector<ValueRef> grad_log_determinant(GradCtx& c) {
  if (!c.dy[1].valid()) return {ValueRef{}};
  Graph& g = c.g;
  ValueRef s = unsqueeze(g, unsqueeze(g, c.dy[1], -1), -1);
  return {bin(g, "multiplication", s, mt(g, un(g, "matrix_inverse", c.x(0))))};
}


// ---- decompositions (the backends without a kernel of their own: Metal, CUDA) ----
//
// Unrolled over the columns of a static n x n matrix with the public builder ops, so a backend
// runs them from matrix multiplication, slices and elementwise ops. The graph grows with n: above
// kMaxUnrolled the decomposition refuses (the CPU's LAPACK kernel runs any size).
constexpr int64_t kMaxUnrolled = 128;

// The matrix size n of input a, every input's dims known (specialisation expands a composite only
// then; a picture of a graph with unknown dims leaves it folded).
int64_t unrolled_size(Graph& g, const std::vector<ValueRef>& in, const char* op) {
  for (ValueRef v : in)
    if (!shape_known(g.type(v).shape))
      raise(ErrorKind::NotImplemented, op, "",
            "the decomposition unrolls over the matrix size, which must be known: got " + type_str(g.type(v)));
  const int64_t n = g.type(in[0]).shape.back();
  if (n > kMaxUnrolled)
    raise(ErrorKind::NotImplemented, op, "",
          "a " + std::to_string(n) + "x" + std::to_string(n) +
              " matrix is above the largest size its decomposition unrolls (" + std::to_string(kMaxUnrolled) +
              "), which backends without a native " + op +
              " (Metal, CUDA) run; the CPU backend (LAPACK) runs any size");
  return n;
}

ValueRef sl(Graph& g, ValueRef x, int64_t axis, int64_t start, int64_t len) {
  return call(g, "slice", {x}, {{"axis", axis}, {"start", start}, {"length", len}});
}
ValueRef cat(Graph& g, const std::vector<ValueRef>& v, int64_t axis) {
  return v.size() == 1 ? v[0] : call(g, "concat", v, {{"axis", axis}});
}
// Element (i, j) of each matrix, as (..., 1, 1).
ValueRef at(Graph& g, ValueRef m, int64_t i, int64_t j) { return sl(g, sl(g, m, -2, i, 1), -1, j, 1); }

// The half types are decomposed in float32, as the CPU kernels compute them.
DType compute_type(DType t) { return t == DType::Float16 || t == DType::BFloat16 ? DType::Float32 : t; }
ValueRef to(Graph& g, ValueRef v, DType t) {
  return g.type(v).dtype == t ? v : call(g, "cast", {v}, {{"dtype", t}});
}

// Cholesky-Crout, column by column from the lower triangle: v = A[j:, j] - L[j:, :j] L[j, :j]^T,
// L[j:, j] = v / sqrt(v[0]). A matrix with a pivot that is not > 0 is all NaN, as the kernel.
std::vector<ValueRef> expand_cholesky(Graph& g, const std::vector<ValueRef>& in, const Attrs& attrs) {
  const bool upper = get_attr<bool>(attrs, "upper");
  const DType t = g.type(in[0]).dtype;
  const int64_t n = unrolled_size(g, in, "cholesky");
  if (n == 0) return {zeros_like(g, in[0])};
  ValueRef a = to(g, upper ? mt(g, in[0]) : in[0], compute_type(t));
  ValueRef l, ok;
  for (int64_t j = 0; j < n; ++j) {
    ValueRef col = sl(g, a, -1, j, 1);
    ValueRef v = sl(g, col, -2, j, n - j);
    if (j > 0) v = bin(g, "subtraction", v, mm(g, sl(g, l, -2, j, n - j), mt(g, sl(g, l, -2, j, 1))));
    ValueRef d = sl(g, v, -2, 0, 1);
    ValueRef c = bin(g, "division", v, un(g, "square_root", d));
    if (j > 0) c = cat(g, {zeros_like(g, sl(g, col, -2, 0, j)), c}, -2);
    l = j > 0 ? cat(g, {l, c}, -1) : c;
    ValueRef pos = bin(g, "greater_than", d, k(g, 0.0, d));
    ok = j > 0 ? bin(g, "logical_and", ok, pos) : pos;
  }
  l = call(g, "select", {ok, l, k(g, std::numeric_limits<double>::quiet_NaN(), l)});
  return {to(g, upper ? mt(g, l) : l, t)};
}

// Forward (lower) or back (upper) substitution, row by row, for A X = B; X A = B is the
// transposed problem. Only A's named triangle (and its diagonal unless unit) is read.
std::vector<ValueRef> expand_triangular_solve(Graph& g, const std::vector<ValueRef>& in, const Attrs& attrs) {
  bool upper = get_attr<bool>(attrs, "upper");
  const bool left = get_attr<bool>(attrs, "left"), unit = get_attr<bool>(attrs, "unit_diagonal");
  const DType t = g.type(in[0]).dtype;
  const int64_t n = unrolled_size(g, in, "triangular_solve");
  const Shape &as = g.type(in[0]).shape, &bs = g.type(in[1]).shape;
  Shape out = *broadcast_shapes(batch_of(as, 2), batch_of(bs, 2));
  Shape a_shape = out, b_shape = out;
  a_shape.insert(a_shape.end(), {n, n});
  b_shape.insert(b_shape.end(), bs.end() - 2, bs.end());
  ValueRef b = call(g, "broadcast_to", {in[1]}, {{"shape", b_shape}});
  if (n == 0) return {b};
  ValueRef a = to(g, call(g, "broadcast_to", {in[0]}, {{"shape", a_shape}}), compute_type(t));
  b = to(g, b, compute_type(t));
  if (!left) {  // X A = B  <=>  A^T X^T = B^T, with the other triangle
    a = mt(g, a);
    b = mt(g, b);
    upper = !upper;
  }
  std::vector<ValueRef> rows(static_cast<size_t>(n));
  for (int64_t s = 0; s < n; ++s) {
    const int64_t i = upper ? n - 1 - s : s;
    ValueRef r = sl(g, b, -2, i, 1);
    if (s > 0) {
      ValueRef ai = sl(g, a, -2, i, 1);
      ValueRef known = cat(g, upper ? std::vector<ValueRef>(rows.begin() + i + 1, rows.end()) : std::vector<ValueRef>(rows.begin(), rows.begin() + i), -2);
      r = bin(g, "subtraction", r, mm(g, upper ? sl(g, ai, -1, i + 1, s) : sl(g, ai, -1, 0, i), known));
    }
    rows[size_t(i)] = unit ? r : bin(g, "division", r, at(g, a, i, i));
  }
  ValueRef x = cat(g, rows, -2);
  return {to(g, left ? x : mt(g, x), t)};
}

// The column (m, 1) of row numbers 0 .. m-1 (int32, the dtype of reduction_arg_maximum).
ValueRef row_iota(Graph& g, int64_t m) {
  auto a = Array::empty(DType::Int32, {m, 1});
  auto* p = static_cast<int32_t*>(a->data());
  for (int64_t i = 0; i < m; ++i) p[i] = int32_t(i);
  return g.constant(a);
}

// LU with partial pivoting (the first largest |pivot|, as LAPACK's getrf): the pivots of each
// elimination step and the sign of the row permutation, as (..., 1, n) and (..., 1, 1). An exactly
// zero column is skipped (its pivot is 0), as getrf does, so a singular matrix has a zero pivot.
std::pair<ValueRef, ValueRef> lu_pivots(Graph& g, ValueRef a, int64_t n) {
  std::vector<ValueRef> pivots;
  ValueRef sign;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t m = n - j;
    if (m > 1) {
      // swap row 0 and the pivot row p: S += (u0 - ep) (S[p] - S[0]), ep = (iota == p) (elementwise,
      // so every backend with the elementwise family runs it)
      const DType ct = g.type(a).dtype;
      ValueRef iota = row_iota(g, m);
      ValueRef p = call(g, "reduction_arg_maximum", {un(g, "absolute", sl(g, a, -1, 0, 1))}, {{"axis", int64_t(-2)}});
      ValueRef ep = to(g, bin(g, "equal", iota, p), ct);
      ValueRef e0 = sl(g, ep, -2, 0, 1);  // 1 where no swap
      ValueRef diff = bin(g, "subtraction", mm(g, mt(g, ep), a), sl(g, a, -2, 0, 1));
      ValueRef unit0 = to(g, bin(g, "equal", iota, k(g, 0.0, iota)), ct);
      a = bin(g, "addition", a, bin(g, "multiplication", bin(g, "subtraction", unit0, ep), diff));
      ValueRef s = bin(g, "subtraction", bin(g, "multiplication", e0, k(g, 2.0, e0)), k(g, 1.0, e0));
      sign = sign.valid() ? bin(g, "multiplication", sign, s) : s;
    }
    ValueRef piv = at(g, a, 0, 0);
    pivots.push_back(piv);
    if (m > 1) {
      ValueRef zero = bin(g, "equal", piv, k(g, 0.0, piv));
      ValueRef safe = call(g, "select", {zero, k(g, 1.0, piv), piv});
      ValueRef low = bin(g, "division", sl(g, sl(g, a, -1, 0, 1), -2, 1, m - 1), safe);
      ValueRef row = sl(g, sl(g, a, -2, 0, 1), -1, 1, m - 1);
      a = bin(g, "subtraction", sl(g, sl(g, a, -2, 1, m - 1), -1, 1, m - 1), bin(g, "multiplication", low, row));
    }
  }
  if (!sign.valid()) sign = ones_like(g, pivots[0]);
  return {cat(g, pivots, -1), sign};
}

ValueRef squeeze_matrix(Graph& g, ValueRef v) {
  return call(g, "squeeze", {v}, {{"axes", std::vector<int64_t>{-2, -1}}});
}
ValueRef reduce_matrix(Graph& g, const char* op, ValueRef v) {
  return call(g, op, {v}, {{"axes", std::vector<int64_t>{-2, -1}}, {"keep_dims", false}});
}

// det = sign(P) prod(pivots); 1 for 0x0 matrices.
std::vector<ValueRef> expand_determinant(Graph& g, const std::vector<ValueRef>& in, const Attrs&) {
  const DType t = g.type(in[0]).dtype;
  const int64_t n = unrolled_size(g, in, "determinant");
  if (n == 0) return {reduce_matrix(g, "reduction_product", in[0])};
  auto [pivots, sign] = lu_pivots(g, to(g, in[0], compute_type(t)), n);
  return {to(g, squeeze_matrix(g, bin(g, "multiplication", sign, call(g, "reduction_product", {pivots}, {{"axes", std::vector<int64_t>{-1}}}))), t)};
}

// (sign(P) prod(sign(pivots)), sum(log|pivots|)): (0, -inf) with a zero pivot, NaN with a NaN one.
std::vector<ValueRef> expand_log_determinant(Graph& g, const std::vector<ValueRef>& in, const Attrs&) {
  const DType t = g.type(in[0]).dtype;
  const int64_t n = unrolled_size(g, in, "log_determinant");
  if (n == 0) {
    ValueRef one = reduce_matrix(g, "reduction_product", in[0]);
    return {one, reduce_matrix(g, "reduction_sum", in[0])};
  }
  auto [pivots, sign] = lu_pivots(g, to(g, in[0], compute_type(t)), n);
  const std::vector<int64_t> last{-1};
  ValueRef s = bin(g, "multiplication", sign, call(g, "reduction_product", {un(g, "sign", pivots)}, {{"axes", last}}));
  s = bin(g, "addition", s, k(g, 0.0, s));  // -0 to 0, as numpy
  ValueRef logabs = call(g, "reduction_sum", {un(g, "logarithm", un(g, "absolute", pivots))}, {{"axes", last}});
  return {to(g, squeeze_matrix(g, s), t), to(g, squeeze_matrix(g, logabs), t)};
}

}  // namespace

void register_linalg_ops() {
  register_op({.name = "matrix_inverse",
               .doc = "The inverse of each square matrix in the last two dims (MPSGraph's inverseOfTensor:, "
                      "numpy.linalg.inv). A matrix whose LU factorisation meets an exact zero pivot gives NaN "
                      "(numpy raises); nearly singular ones give large values, as numpy.",
               .inputs = {{"x"}},
               .infer = infer_square,
               .grad = grad_matrix_inverse,
               .aliases = {"inv"},
               .family = "linalg"});
  register_op({.name = "solve",
               .doc = "X with A X = B for each square matrix A (..., n, n), by LU with partial pivoting "
                      "(numpy.linalg.solve): b is (..., n, k) with batch dims broadcast against a's, or a vector "
                      "(n,). An exactly singular A gives NaN (numpy raises).",
               .inputs = {{"a"}, {"b"}},
               .infer = infer_solve,
               .grad = grad_solve,
               .family = "linalg"});
  register_op({.name = "cholesky",
               .doc = "The Cholesky factor of each symmetric positive-definite matrix: lower L with A = L L^T, "
                      "read from A's lower triangle, or with upper=True U = L^T read from the upper triangle "
                      "(numpy/torch.linalg.cholesky). A matrix that is not positive definite gives NaN (numpy "
                      "and torch raise). The gradient is that of the triangle read: it equals torch's on any "
                      "symmetric construction of A (e.g. M M^T).",
               .inputs = {{"x"}},
               .attrs = {attr("upper", AttrKind::Bool, false, "return U = L^T, reading the upper triangle")},
               .decode = attr_decoder(decode_cholesky),
               .infer = infer_square,
               .grad = grad_cholesky,
               .family = "linalg",
               .expand = expand_cholesky});
  register_op({.name = "triangular_solve",
               .doc = "X with A X = B (left) or X A = B (right) for triangular A (..., n, n) and B (..., n, k) "
                      "(..., k, n) on the right), batch dims broadcast (torch.linalg.solve_triangular). Only the "
                      "triangle named by `upper` is read; unit_diagonal takes the diagonal as ones without "
                      "reading it. A zero on the diagonal gives inf/NaN, as the division does.",
               .inputs = {{"a"}, {"b"}},
               .attrs = {attr("upper", AttrKind::Bool, AttrNone{}, "A is upper (True) or lower (False) triangular"),
                         attr("left", AttrKind::Bool, true, "solve A X = B (True) or X A = B (False)"),
                         attr("unit_diagonal", AttrKind::Bool, false, "take A's diagonal as ones")},
               .decode = attr_decoder(decode_triangular_solve),
               .infer = infer_triangular_solve,
               .grad = grad_triangular_solve,
               .aliases = {"solve_triangular"},
               .family = "linalg",
               .expand = expand_triangular_solve});
  register_op({.name = "determinant",
               .doc = "The determinant of each square matrix (numpy.linalg.det), from an LU factorisation with "
                      "partial pivoting; 0 for a singular matrix. The gradient det(A) A^-T is NaN there.",
               .inputs = {{"x"}},
               .infer = infer_determinant,
               .grad = grad_determinant,
               .aliases = {"det"},
               .family = "linalg",
               .expand = expand_determinant});
  register_op({.name = "log_determinant",
               .doc = "(sign, log|det|) of each square matrix, as numpy.linalg.slogdet: the sign is -1, 0 or 1 "
                      "and a singular matrix gives (0, -inf). The gradient of log|det| is A^-T; the sign has none.",
               .inputs = {{"x"}},
               .infer = infer_log_determinant,
               .grad = grad_log_determinant,
               .multi_output = true,
               .aliases = {"slogdet"},
               .family = "linalg",
               .expand = expand_log_determinant});
}

}  // namespace mg::ops
