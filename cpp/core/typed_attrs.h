// Typed attributes: an op's attributes decoded once, when its node is made, into a plain
// struct declared in its family's header (core/ops/*_attrs.h). Kernels and lowerings read
// that struct with typed_attrs<S>(node) and never look an attribute up by name.
//
//   registry entry:   .attrs = {...}, .decode = attr_decoder(decode_reduction_attrs), ...
//   kernel/lowering:  const ReductionAttrs& a = typed_attrs<ReductionAttrs>(node);
//
// The decoder runs after inference has normalised the attributes (defaults filled, axes
// resolved), in Graph::add and again at specialisation, where inference runs with concrete
// shapes and may resolve more (e.g. 'same' padding).
#pragma once
#include <functional>
#include <memory>
#include <typeinfo>

#include "core/attrs.h"

namespace mg {

struct Node;

// How an op's attributes decode: the struct's type and the function building it from the
// node's (normalised) attributes. Empty for ops whose backends read no attribute.
struct AttrDecoder {
  const std::type_info* type = nullptr;
  std::function<std::shared_ptr<const void>(const Attrs&)> fn;
  explicit operator bool() const { return type != nullptr; }
};

// The decoder of an op whose attributes decode into S by `decode`.
template <class S>
AttrDecoder attr_decoder(S (*decode)(const Attrs&)) {
  return {&typeid(S),
          [decode](const Attrs& a) -> std::shared_ptr<const void> { return std::make_shared<const S>(decode(a)); }};
}

// Runs the node's op's decoder on its attributes (clears the decoded value for ops without one).
void decode_attrs(Node& n);

// The node's decoded attributes as S. Raises an internal error (GraphError, Runtime) naming the
// op, the node and both types when the op does not decode into S, or when the node was never
// decoded.
const void* typed_attrs_ptr(const Node& n, const std::type_info& want);
template <class S>
const S& typed_attrs(const Node& n) {
  return *static_cast<const S*>(typed_attrs_ptr(n, typeid(S)));
}

}  // namespace mg
