// Creation ops. Fills (zeros, ones, full, full_like) are a broadcast scalar constant. Ops whose
// value depends on attributes only (arange, eye) and that specialisation did not already fold
// (it folds up to 65536 elements) are evaluated once at compile time by the CPU backend's
// constant evaluator and embedded with constantWithData:shape:dataType:, so their values are
// the CPU kernels' to the bit.
#include "backends/metal/metal_internal.h"
#include "core/ops/creation_attrs.h"
#include "runtime/backend.h"

namespace mg::metal {

namespace {

using T = MPSGraphTensor*;

std::vector<T> evaluate_at_compile_time(LowerCtx& c) {
  if (!c.in.empty()) c.fail(ErrorKind::NotImplemented, "is not implemented on the metal backend (it has tensor inputs)");
  std::vector<std::shared_ptr<Array>> values = c.evaluator().evaluate(c.node, {});
  if (values.size() != c.out_types.size())
    c.fail(ErrorKind::NotImplemented, "is not implemented on the metal backend (no compile-time evaluation)");
  std::vector<T> outs;
  for (auto& v : values) {
    c.keep_alive->push_back(v);
    NSData* d = [NSData dataWithBytesNoCopy:v->data() length:v->nbytes() freeWhenDone:NO];
    outs.push_back([c.g constantWithData:d shape:mps_shape(v->shape) dataType:mps_dtype(v->dtype, c.op, c.node.name)]);
  }
  return outs;
}

}  // namespace

void register_creation_lowerings() {
  register_lowering("zeros", [](LowerCtx& c) { return std::vector<T>{c.fill(0, c.out())}; });
  register_lowering("ones", [](LowerCtx& c) { return std::vector<T>{c.fill(1, c.out())}; });
  register_lowering("zeros_like", [](LowerCtx& c) { return std::vector<T>{c.fill(0, c.out())}; });
  register_lowering("ones_like", [](LowerCtx& c) { return std::vector<T>{c.fill(1, c.out())}; });
  for (const char* name : {"full", "full_like"})
    register_lowering(name, [](LowerCtx& c) {
      return std::vector<T>{c.fill(typed_attrs<ops::FillAttrs>(c.node).value, c.out())};
    });
  for (const char* name : {"arange", "eye"}) register_lowering(name, evaluate_at_compile_time);
}

}  // namespace mg::metal
