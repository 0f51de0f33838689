// Node attributes: a small closed set of value kinds, comparable and hashable for CSE.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "core/dtype.h"

namespace mg {

struct Array;  // constant payloads (core/array.h)

enum class AttrKind { Int, Float, Bool, String, Ints, Floats, DType, Shape, Axes, Tensor };
const char* attr_kind_name(AttrKind k);

struct AttrNone {
  bool operator==(const AttrNone&) const { return true; }
};
using AttrValue = std::variant<AttrNone, int64_t, double, bool, std::string, std::vector<int64_t>,
                               std::vector<double>, DType, std::shared_ptr<const Array>>;

using Attrs = std::map<std::string, AttrValue>;

bool attr_equal(const AttrValue& a, const AttrValue& b);
size_t attr_hash(const AttrValue& a);
std::string attr_repr(const AttrValue& a);

}  // namespace mg
