// Ops with data-dependent output shapes (OpDef::data_dependent): a dim of the result is
// known only once the op has run. Specialisation keeps it unknown and the runtime runs the
// graph in stages around such nodes (runtime/executable.h, docs/data_dependent.md).
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/ops/common.h"

namespace mg::ops {

namespace {

std::vector<TensorType> infer_non_zero_indices(InferCtx& c) {
  for (auto d : c.in[0].shape)
    if (d > std::numeric_limits<int32_t>::max())
      c.fail(ErrorKind::Value, "dim " + std::to_string(d) + " of " + type_str(c.in[0]) + " does not fit the int32 indices");
  return {TensorType{DType::Int32, {kUnknownDim, int64_t(c.in[0].shape.size())}}};
}

}  // namespace

void register_dynamic_ops() {
  register_op(
      {.name = "non_zero_indices",
       .doc = "The indices of x's non-zero elements: an int32 tensor of shape (count, rank) whose row i is\n"
              "the index of the i-th non-zero element in row-major order (numpy's argwhere, as int32,\n"
              "MPSGraph's result type). Every dtype: NaN counts as non-zero, -0.0 as zero, False as\n"
              "zero. A rank-0 x gives shape (1, 0) or (0, 0).\n\n"
              "`count` is data-dependent: known only once the op has run, so it is None in the static\n"
              "shape. A graph that uses the result runs in stages: the part the op needs is compiled\n"
              "and run, the op runs, and the rest is specialised for the count found (cached by it) and\n"
              "run; values computed before the op are computed once per run. Not differentiable.",
       .inputs = {{"x"}},
       .infer = infer_non_zero_indices,
       .differentiable = Differentiable::No,
       .family = "dynamic",
       .data_dependent = [](const Node&) { return true; }});
}

}  // namespace mg::ops
