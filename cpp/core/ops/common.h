// Helpers shared by the op family files.
#pragma once
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/registry.h"

namespace mg::ops {

inline AttrSpec attr(const std::string& name, AttrKind kind, AttrValue def = AttrNone{}, const std::string& doc = "",
                     bool optional = false) {
  return AttrSpec{name, kind, std::move(def), optional, doc};
}
inline AttrSpec optional_attr(const std::string& name, AttrKind kind, const std::string& doc = "") {
  return AttrSpec{name, kind, AttrNone{}, true, doc};
}

// An attribute as decoders and decompositions read it: inference filled every default, so a
// missing one (or one of another kind) is an internal error. Optional attributes may be absent.
template <class T>
const T& get_attr(const Attrs& a, const std::string& name) {
  auto it = a.find(name);
  if (it == a.end() || !std::holds_alternative<T>(it->second))
    throw std::logic_error("internal error: attribute '" + name + "' is missing or of an unexpected kind");
  return std::get<T>(it->second);
}
inline bool has_attr(const Attrs& a, const std::string& name) { return a.count(name) > 0; }

// dtype classes accepted by an op
enum TypeClass : unsigned {
  kBool = 1, kSigned = 2, kUnsigned = 4, kFloat = 8,
  kInt = kSigned | kUnsigned, kNumeric = kInt | kFloat, kAny = kNumeric | kBool,
  kComplex = 16,  // complex64 / complex128: never part of kAny, an op opts in
};
bool in_class(DType t, unsigned cls);
std::string class_name(unsigned cls);
void require_class(const InferCtx& c, size_t input, unsigned cls);

// Builder shorthands used by gradient rules: the same ops users call.
inline ValueRef call(Graph& g, const std::string& op, const std::vector<ValueRef>& in, Attrs attrs = {}) {
  return g.add1(op, in, std::move(attrs));
}

// Gradient-rule helpers (core/ops/autodiff_ops.cpp). All build ordinary ops, so their
// gradients are differentiable again; shapes may hold unknown dims.
ValueRef sum_to_like(Graph& g, ValueRef grad, ValueRef like);        // undo broadcasting: sum grad down to like's shape
ValueRef broadcast_like(Graph& g, ValueRef x, ValueRef like);        // broadcast x up to like's shape
ValueRef zeros_like(Graph& g, ValueRef like);
ValueRef ones_like(Graph& g, ValueRef like);
ValueRef scalar_like(Graph& g, double v, ValueRef like);            // rank-0 constant of like's dtype

// Shorthands for composites' decompositions.
inline ValueRef un(Graph& g, const char* op, ValueRef a) { return call(g, op, {a}); }
inline ValueRef bin(Graph& g, const char* op, ValueRef a, ValueRef b) { return call(g, op, {a, b}); }
inline ValueRef k(Graph& g, double v, ValueRef like) { return scalar_like(g, v, like); }

void register_memory_ops();
void register_autodiff_ops();
void register_nn_ops();
void register_random_ops();
void register_normalization_ops();
void register_elementwise_ops();
void register_reduction_ops();
void register_matmul_ops();
void register_shape_ops();
void register_creation_ops();
void register_pooling_ops();
void register_resize_ops();
void register_convolution_ops();
void register_control_flow_ops();
void register_sparse_ops();
void register_dynamic_ops();
void register_gather_ops();
void register_sort_ops();
void register_complex_ops();  // core/ops/complex.cpp
void register_fft_ops();
void register_attention_ops();
void register_rnn_ops();

}  // namespace mg::ops
