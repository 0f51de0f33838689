// Matrix multiplication with numpy matmul semantics: 1-D operands are promoted (a leading
// 1 for x, a trailing 1 for y) and the added dim removed again; batch dims broadcast.
#include <cstdint>
#include <utility>
#include <vector>

#include "core/ops/common.h"

namespace mg::ops {

namespace {

// (..., a, b) -> (..., b, a)
ValueRef swap_last2(Graph& g, ValueRef v) {
  int64_t r = int64_t(g.type(v).shape.size());
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < r; ++i) perm.push_back(i);
  std::swap(perm[size_t(r - 2)], perm[size_t(r - 1)]);
  return call(g, "transpose", {v}, {{"permutation", perm}});
}

ValueRef expand(Graph& g, ValueRef v, int64_t axis) {
  return call(g, "expand_dims", {v}, {{"axes", std::vector<int64_t>{axis}}});
}

std::vector<ValueRef> grad_matmul(GradCtx& c) {
  if (!c.dy[0].valid()) return {ValueRef{}, ValueRef{}};
  Graph& g = c.g;
  ValueRef x = c.x(0), y = c.x(1), dy = c.dy[0];
  size_t rx = g.type(x).shape.size(), ry = g.type(y).shape.size();
  if (rx == 1 && ry == 1) {  // dot product: dy is a scalar
    return {call(g, "multiplication", {dy, y}), call(g, "multiplication", {dy, x})};
  }
  if (rx == 1) {  // (K) @ (..., K, N) -> (..., N)
    ValueRef dy2 = expand(g, dy, -2);                                            // (..., 1, N)
    ValueRef dx = call(g, "matrix_multiplication", {dy2, swap_last2(g, y)});      // (..., 1, K)
    ValueRef dyy = call(g, "matrix_multiplication", {expand(g, x, -1), dy2});    // (..., K, N)
    return {sum_to_like(g, dx, x), sum_to_like(g, dyy, y)};
  }
  if (ry == 1) {  // (..., M, K) @ (K) -> (..., M)
    ValueRef dy2 = expand(g, dy, -1);                                            // (..., M, 1)
    ValueRef dx = call(g, "matrix_multiplication", {dy2, expand(g, y, 0)});      // (..., M, K)
    ValueRef dyy = call(g, "matrix_multiplication", {swap_last2(g, x), dy2});    // (..., K, 1)
    dyy = call(g, "squeeze", {dyy}, {{"axes", std::vector<int64_t>{-1}}});      // (..., K)
    return {sum_to_like(g, dx, x), sum_to_like(g, dyy, y)};
  }
  ValueRef dx = call(g, "matrix_multiplication", {dy, swap_last2(g, y)});
  ValueRef dyy = call(g, "matrix_multiplication", {swap_last2(g, x), dy});
  return {sum_to_like(g, dx, x), sum_to_like(g, dyy, y)};
}


// ---- matrix_multiplication ----

std::vector<TensorType> infer_matrix_multiplication(InferCtx& c) {
  c.same_dtype(0, 1);
  require_class(c, 0, kNumeric);
  const Shape& xs0 = c.in[0].shape;
  const Shape& ys0 = c.in[1].shape;
  if (xs0.empty() || ys0.empty())
    c.fail(ErrorKind::Value, "operands must have rank >= 1, got " + shape_str(xs0) + " @ " + shape_str(ys0) +
                                 "; use multiplication for scalars");
  Shape xs = xs0, ys = ys0;
  if (xs.size() == 1) xs.insert(xs.begin(), 1);
  if (ys.size() == 1) ys.push_back(1);
  int64_t kx = xs.back(), ky = ys[ys.size() - 2];
  if (kx >= 0 && ky >= 0 && kx != ky)
    c.fail(ErrorKind::Value, "inner dimensions differ: " + shape_str(xs0) + " @ " + shape_str(ys0));
  Shape bx(xs.begin(), xs.end() - 2), by(ys.begin(), ys.end() - 2);
  auto b = broadcast_shapes(bx, by);
  if (!b)
    c.fail(ErrorKind::Value, "batch dimensions do not broadcast: " + shape_str(xs0) + " @ " + shape_str(ys0));
  Shape out = *b;
  if (xs0.size() > 1) out.push_back(xs[xs.size() - 2]);
  if (ys0.size() > 1) out.push_back(ys.back());
  return std::vector<TensorType>{{c.in[0].dtype, out}};
}

}  // namespace

void register_matmul_ops() {
  register_op(
      {.name = "matrix_multiplication",
       .doc = "Matrix product with numpy matmul semantics: (..., M, K) @ (..., K, N) -> (..., M, N); batch dims "
              "broadcast; a 1-D operand is treated as a row (x) or column (y) vector and that dim is dropped from "
              "the result. Both inputs must have the same numeric dtype; integers wrap around.",
       .inputs = {{"x"}, {"y"}},
       .infer = infer_matrix_multiplication,
       .grad = grad_matmul,
       .aliases = {"matmul"},
       .family = "matmul"});
}

}  // namespace mg::ops
