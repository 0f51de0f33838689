// Graph inputs and state: placeholder, constant, variables.
#include <string>
#include <vector>

#include "core/ops/common.h"

namespace mg::ops {

namespace {

// ---- placeholder ----

std::vector<TensorType> infer_placeholder(InferCtx& c) {
  for (auto d : c.ints("shape"))
    if (d < -1) c.fail(ErrorKind::Value, "negative dim " + std::to_string(d) + " in shape");
  return std::vector<TensorType>{{c.dtype("dtype"), c.ints("shape")}};
}

// ---- constant ----

std::vector<TensorType> infer_constant(InferCtx& c) {
  auto& v = c.tensor("value");
  return std::vector<TensorType>{{v->dtype, v->shape}};
}

// ---- read_variable ----

std::vector<TensorType> infer_read_variable(InferCtx& c) {
  return std::vector<TensorType>{{c.dtype("dtype"), c.ints("shape")}};
}

// ---- assign_variable ----

std::vector<TensorType> infer_assign_variable(InferCtx& c) {
  TensorType want{c.dtype("dtype"), c.ints("shape")};
  const TensorType& got = c.in[0];
  bool ok = got.dtype == want.dtype && got.shape.size() == want.shape.size();
  for (size_t i = 0; ok && i < got.shape.size(); ++i) ok = got.shape[i] < 0 || got.shape[i] == want.shape[i];
  if (!ok) c.fail(ErrorKind::Value, "value of type " + type_str(got) + " cannot be assigned to a variable of type " + type_str(want));
  return std::vector<TensorType>{};
}

}  // namespace

void register_memory_ops() {
  register_op({.name = "placeholder",
               .doc = "A tensor fed at run time. Dims given as None are known only when it is fed.",
               .attrs = {attr("shape", AttrKind::Shape), attr("dtype", AttrKind::DType, DType::Float32)},
               .infer = infer_placeholder,
               .differentiable = Differentiable::No,
               .python_method = false,
               .family = "memory"});
  register_op({.name = "constant",
               .doc = "A constant tensor; its value is part of the graph.",
               .attrs = {attr("value", AttrKind::Tensor)},
               .infer = infer_constant,
               .differentiable = Differentiable::No,
               .python_method = false,
               .family = "memory"});
  register_op({.name = "read_variable",
               .doc = "The value of a variable at the start of the run.",
               .attrs = {attr("variable", AttrKind::Int), attr("dtype", AttrKind::DType), attr("shape", AttrKind::Shape)},
               .infer = infer_read_variable,
               .differentiable = Differentiable::No,
               .stateful = true,
               .python_method = false,
               .family = "memory"});
  register_op({.name = "assign_variable",
               .doc = "Sets a variable to a value when the run completes; a target operation.",
               .inputs = {{"value"}},
               .attrs = {attr("variable", AttrKind::Int), attr("dtype", AttrKind::DType), attr("shape", AttrKind::Shape),
                         attr("follows_input", AttrKind::Bool, false,
                              "runs whenever its value is computed, without being a target (an assign made "
                              "inside a control-flow region lands after the op that ran it)")},
               .infer = infer_assign_variable,
               .differentiable = Differentiable::No,
               .stateful = true,
               .python_method = false,
               .family = "memory"});
}

}  // namespace mg::ops
