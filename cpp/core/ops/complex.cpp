// Complex numbers (elementwise family): real_part, imaginary_part, conjugate, complex, angle,
// and which data-movement ops take complex tensors.
//
// Gradients follow PyTorch's convention: the gradient of a real loss L at z = x + iy is
// dL/dx + i dL/dy (JAX's is its conjugate), so `z - lr * grad` descends.
#include <string>
#include <vector>

#include "core/ops/common.h"

namespace mg::ops {

namespace {

ValueRef complex_of(Graph& g, ValueRef re, ValueRef im) { return call(g, "complex", {re, im}); }

std::vector<TensorType> infer_complex_part(InferCtx& c) {
  require_class(c, 0, kComplex);
  return std::vector<TensorType>{{complex_part_dtype(c.in[0].dtype), c.in[0].shape}};
}

std::vector<ValueRef> grad_real_part(GradCtx& c) {
  return std::vector<ValueRef>{complex_of(c.g, c.dy[0], zeros_like(c.g, c.dy[0]))};
}

std::vector<ValueRef> grad_imaginary_part(GradCtx& c) {
  return std::vector<ValueRef>{complex_of(c.g, zeros_like(c.g, c.dy[0]), c.dy[0])};
}

std::vector<TensorType> infer_conjugate(InferCtx& c) {
  require_class(c, 0, kFloat | kComplex);
  return std::vector<TensorType>{c.in[0]};
}

std::vector<ValueRef> grad_conjugate(GradCtx& c) { return std::vector<ValueRef>{call(c.g, "conjugate", {c.dy[0]})}; }

std::vector<TensorType> infer_complex(InferCtx& c) {
  c.same_dtype(0, 1);
  DType t = c.in[0].dtype;
  if (t != DType::Float32 && t != DType::Float64)
    c.fail(ErrorKind::Type, "takes float32 or float64 parts (complex64 / complex128), got " + type_str(c.in[0]) +
                                "; complex32 is not supported: cast float16 parts to float32");
  return std::vector<TensorType>{{t == DType::Float32 ? DType::Complex64 : DType::Complex128, c.broadcast({0, 1})}};
}

std::vector<ValueRef> grad_complex(GradCtx& c) {
  return std::vector<ValueRef>{sum_to_like(c.g, call(c.g, "real_part", {c.dy[0]}), c.x(0)),
                               sum_to_like(c.g, call(c.g, "imaginary_part", {c.dy[0]}), c.x(1))};
}

// angle = atan2(y, x): dL/dx + i dL/dy = dy * (-y + ix) / |z|^2, and 0 at z == 0
std::vector<ValueRef> grad_angle(GradCtx& c) {
  Graph& g = c.g;
  ValueRef z = c.x(0), dy = c.dy[0];
  ValueRef re = call(g, "real_part", {z}), im = call(g, "imaginary_part", {z});
  ValueRef r2 = bin(g, "addition", bin(g, "multiplication", re, re), bin(g, "multiplication", im, im));
  ValueRef safe = call(g, "select", {bin(g, "equal", r2, k(g, 0, r2)), k(g, 1, r2), r2});
  ValueRef w = bin(g, "division", dy, safe);
  return std::vector<ValueRef>{
      complex_of(g, un(g, "negative", bin(g, "multiplication", w, im)), bin(g, "multiplication", w, re))};
}

}  // namespace

void register_complex_ops() {
  register_op({.name = "real_part",
               .doc = "The real part of a complex tensor (float32 for complex64), as numpy's real.",
               .inputs = {{"x"}},
               .infer = infer_complex_part,
               .grad = grad_real_part,
               .aliases = {"real"},
               .family = "elementwise",
               .complex = true});
  register_op({.name = "imaginary_part",
               .doc = "The imaginary part of a complex tensor (float32 for complex64), as numpy's imag.",
               .inputs = {{"x"}},
               .infer = infer_complex_part,
               .grad = grad_imaginary_part,
               .aliases = {"imag"},
               .family = "elementwise",
               .complex = true});
  register_op({.name = "conjugate",
               .doc = "Complex conjugate x - iy; a real tensor is returned unchanged.",
               .inputs = {{"x"}},
               .infer = infer_conjugate,
               .grad = grad_conjugate,
               .aliases = {"conj"},
               .family = "elementwise",
               .complex = true});
  register_op({.name = "complex",
               .doc = "real + i * imaginary, broadcasting like numpy: float32 parts give complex64, float64 parts "
                      "complex128 (CPU only). complex32 is not supported.",
               .inputs = {{"real"}, {"imaginary"}},
               .infer = infer_complex,
               .grad = grad_complex,
               .family = "elementwise",
               .complex = true});
  register_op({.name = "angle",
               .doc = "The argument of a complex tensor, atan2(imag, real), in (-pi, pi], as numpy's angle.",
               .inputs = {{"x"}},
               .infer = infer_complex_part,
               .grad = grad_angle,
               .family = "elementwise",
               .complex = true});

  // Ops whose kernels move bytes (or are linear in each part) take complex tensors as they are.
  for (const char* op : {"placeholder", "constant", "read_variable", "assign_variable", "sum_to_like",
                         "broadcast_like", "full_like", "stop_gradient", "select", "cast", "reshape", "reshape_like",
                         "transpose", "swap_axes", "expand_dims", "squeeze", "broadcast_to", "slice", "strided_slice",
                         "slice_gradient", "reverse", "tile", "concat", "split", "split_like", "stack", "flatten_2d",
                         "flatten", "shape_of"})
    accept_complex(op);
}

}  // namespace mg::ops
