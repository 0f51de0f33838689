#include "core/registry.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <typeinfo>
#include <utility>
#include <variant>
#if defined(__GNUG__) || defined(__clang__)
#include <cxxabi.h>
#endif

namespace mg {

namespace {
std::map<std::string, std::unique_ptr<OpDef>>& table() {
  static auto* t = new std::map<std::string, std::unique_ptr<OpDef>>();  // never destroyed: runs may outlive exit
  return *t;
}
}  // namespace

void register_all_ops();  // core/ops/all_ops.cpp

static void ensure_registered() {
  static bool done = [] {
    register_all_ops();
    return true;
  }();
  (void)done;
}

void register_op(OpDef def) {
  if (!def.infer) throw std::logic_error("op '" + def.name + "' registered without inference");
  if ((def.grad || def.composite()) && def.differentiable == Differentiable::Unset) def.differentiable = Differentiable::Yes;
  if (def.differentiable == Differentiable::Unset)  // every op states how gradients pass through it
    throw std::logic_error("op '" + def.name + "' registered with neither a gradient rule nor Differentiable::No");
  if (def.differentiable == Differentiable::Yes && !def.grad && !def.composite())
    throw std::logic_error("op '" + def.name + "' is marked differentiable but has no gradient rule");
  if (table().count(def.name)) throw std::logic_error("op '" + def.name + "' registered twice");
  auto p = std::make_unique<OpDef>(std::move(def));
  std::string n = p->name;
  table()[n] = std::move(p);
}

void accept_complex(const std::string& name) {
  auto it = table().find(name);
  if (it == table().end()) throw std::logic_error("accept_complex: op '" + name + "' is not registered");
  it->second->complex = true;
}

const char* input_role_name(InputRole r) {
  switch (r) {
    case InputRole::Data: return "data";
    case InputRole::ShapeOnly: return "shape_only";
    case InputRole::Index: return "index";
    case InputRole::Predicate: return "predicate";
  }
  return "data";
}

bool per_sample_broadcast(const Node& n, const std::vector<TensorType>& in, const std::vector<char>& batched) {
  const size_t rank = n.outputs.at(0).shape.size();
  bool any = false;
  for (size_t k = 0; k < in.size(); ++k) {
    const Shape& s = in[k].shape;
    if (batched[k]) {
      if (s.size() != rank) return false;  // its axis 0 would broadcast along another output axis
      any = true;
    } else if (s.size() == rank && !s.empty() && s[0] != 1) {
      return false;  // values along the batch axis that no sample owns
    }
  }
  return any;
}

bool per_sample_first_input(const Node&, const std::vector<TensorType>& in, const std::vector<char>& batched) {
  if (in.empty() || !batched[0]) return false;
  for (size_t k = 1; k < in.size(); ++k)
    if (batched[k]) return false;
  return true;
}

const InputSpec& OpDef::input_spec(size_t i) const { return inputs.at(std::min(i, inputs.size() - 1)); }

const OpDef* find_op(const std::string& name) {
  ensure_registered();
  auto it = table().find(name);
  return it == table().end() ? nullptr : it->second.get();
}

const OpDef& get_op(const std::string& name) {
  const OpDef* d = find_op(name);
  if (!d) raise(ErrorKind::Value, name, "", "no such op in the registry");
  return *d;
}

std::vector<const OpDef*> all_ops() {
  ensure_registered();
  std::vector<const OpDef*> r;
  for (auto& kv : table()) r.push_back(kv.second.get());
  return r;
}

// ---- typed attributes ----

void decode_attrs(Node& n) {
  if (n.op && n.op->decode) n.decoded = n.op->decode.fn(n.attrs);
  else n.decoded.reset();
}

void infer_again(Node& n, const std::vector<TensorType>& in) {
  InferCtx ctx(*n.op, n.name, in, n.attrs);
  ctx.absent = n.absent;
  n.outputs = n.op->infer(ctx);
  decode_attrs(n);
}

static std::string type_name(const std::type_info& t) {
#if defined(__GNUG__) || defined(__clang__)
  int status = 0;
  char* d = abi::__cxa_demangle(t.name(), nullptr, nullptr, &status);
  if (d && status == 0) {
    std::string r = d;
    std::free(d);
    return r;
  }
  std::free(d);
#endif
  return t.name();
}

const void* typed_attrs_ptr(const Node& n, const std::type_info& want) {
  const std::string op = n.op ? n.op->name : std::string("?");
  if (!n.op || !n.op->decode)
    raise(ErrorKind::Runtime, op, n.name,
          "internal error: typed attributes " + type_name(want) + " asked of an op that declares none");
  if (*n.op->decode.type != want)
    raise(ErrorKind::Runtime, op, n.name,
          "internal error: the op's attributes decode into " + type_name(*n.op->decode.type) + ", not " +
              type_name(want));
  if (!n.decoded) raise(ErrorKind::Runtime, op, n.name, "internal error: the node's attributes were never decoded");
  return n.decoded.get();
}

// ---- InferCtx ----

void InferCtx::fail(ErrorKind kind, const std::string& msg) const { raise(kind, op.name, node, msg); }

bool InferCtx::has(const std::string& name) const { return attrs.count(name) > 0; }

template <class T>
static const T& get_attr(const InferCtx& c, const std::string& name) {
  auto it = c.attrs.find(name);
  if (it == c.attrs.end()) c.fail(ErrorKind::Value, "missing attribute '" + name + "'");
  const T* p = std::get_if<T>(&it->second);
  if (!p) c.fail(ErrorKind::Type, "attribute '" + name + "' has the wrong kind: " + attr_repr(it->second));
  return *p;
}

int64_t InferCtx::i(const std::string& n) const { return get_attr<int64_t>(*this, n); }
double InferCtx::f(const std::string& n) const { return get_attr<double>(*this, n); }
bool InferCtx::b(const std::string& n) const { return get_attr<bool>(*this, n); }
const std::string& InferCtx::s(const std::string& n) const { return get_attr<std::string>(*this, n); }
const std::vector<int64_t>& InferCtx::ints(const std::string& n) const { return get_attr<std::vector<int64_t>>(*this, n); }
const std::vector<double>& InferCtx::floats(const std::string& n) const { return get_attr<std::vector<double>>(*this, n); }
DType InferCtx::dtype(const std::string& n) const { return get_attr<DType>(*this, n); }
const std::shared_ptr<const Array>& InferCtx::tensor(const std::string& n) const {
  return get_attr<std::shared_ptr<const Array>>(*this, n);
}

void InferCtx::same_dtype(size_t a, size_t b) const {
  if (in[a].dtype != in[b].dtype)
    fail(ErrorKind::Type, std::string("dtypes differ: ") + dtype_name(in[a].dtype) + " vs " + dtype_name(in[b].dtype) +
                              " for inputs " + type_str(in[a]) + " and " + type_str(in[b]) + "; use cast to convert one");
}

Shape InferCtx::broadcast(const std::vector<size_t>& idx) const {
  Shape r = in[idx[0]].shape;
  for (size_t k = 1; k < idx.size(); ++k) {
    auto b = broadcast_shapes(r, in[idx[k]].shape);
    if (!b) {
      std::string shapes;
      for (size_t j = 0; j < idx.size(); ++j) shapes += (j ? " and " : "") + shape_str(in[idx[j]].shape);
      fail(ErrorKind::Value, "shapes do not broadcast: " + shapes);
    }
    r = *b;
  }
  return r;
}

int64_t InferCtx::axis(int64_t a, int64_t rank) const {
  auto r = normalize_axis(a, rank);
  if (!r) fail(ErrorKind::Index, "axis " + std::to_string(a) + " is out of range for rank " + std::to_string(rank) +
                                     " input " + (in.empty() ? std::string() : type_str(in[0])));
  return *r;
}

std::vector<int64_t> InferCtx::axes(const std::vector<int64_t>& ax, int64_t rank) const {
  std::vector<int64_t> r;
  for (auto a : ax) r.push_back(axis(a, rank));
  std::sort(r.begin(), r.end());
  if (std::adjacent_find(r.begin(), r.end()) != r.end()) fail(ErrorKind::Value, "repeated axis in axes");
  return r;
}

}  // namespace mg
