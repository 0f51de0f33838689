#include "core/attrs.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>

#include "core/array.h"

namespace mg {

const char* attr_kind_name(AttrKind k) {
  switch (k) {
    case AttrKind::Int: return "int";
    case AttrKind::Float: return "float";
    case AttrKind::Bool: return "bool";
    case AttrKind::String: return "str";
    case AttrKind::Ints: return "ints";
    case AttrKind::Floats: return "floats";
    case AttrKind::DType: return "dtype";
    case AttrKind::Shape: return "shape";
    case AttrKind::Axes: return "axes";
    case AttrKind::Tensor: return "tensor";
  }
  return "?";
}

static bool array_equal(const Array& a, const Array& b) {
  return a.dtype == b.dtype && a.shape == b.shape && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

bool attr_equal(const AttrValue& a, const AttrValue& b) {
  if (a.index() != b.index()) return false;
  if (auto pa = std::get_if<std::shared_ptr<const Array>>(&a)) {
    auto pb = std::get_if<std::shared_ptr<const Array>>(&b);
    return *pa == *pb || (*pa && *pb && array_equal(**pa, **pb));
  }
  if (std::holds_alternative<double>(a)) {  // bitwise, so NaN attributes compare equal to themselves
    double x = std::get<double>(a), y = std::get<double>(b);
    return std::memcmp(&x, &y, sizeof x) == 0;
  }
  return a == b;
}

static size_t mix(size_t h, size_t v) { return h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2)); }

size_t attr_hash(const AttrValue& a) {
  size_t h = a.index();
  std::visit(
      [&](auto&& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, AttrNone>) {
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          for (auto x : v) h = mix(h, std::hash<int64_t>()(x));
        } else if constexpr (std::is_same_v<T, std::vector<double>>) {
          for (auto x : v) h = mix(h, std::hash<double>()(x));
        } else if constexpr (std::is_same_v<T, DType>) {
          h = mix(h, size_t(v));
        } else if constexpr (std::is_same_v<T, std::shared_ptr<const Array>>) {
          if (v) {
            h = mix(h, size_t(v->dtype));
            for (auto d : v->shape) h = mix(h, size_t(d));
            const unsigned char* p = static_cast<const unsigned char*>(v->data());
            size_t n = std::min<size_t>(v->nbytes(), 256);
            for (size_t i = 0; i < n; ++i) h = mix(h, p[i]);
          }
        } else {
          h = mix(h, std::hash<T>()(v));
        }
      },
      a);
  return h;
}

namespace {
// Numbers as an ostream writes them by default (%g: 6 significant digits); no iostreams in the
// core (CONTRIBUTING.md says why).
std::string number_text(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}
std::string number_text(int64_t v) { return std::to_string(v); }
}  // namespace

std::string attr_repr(const AttrValue& a) {
  std::string o;
  std::visit(
      [&](auto&& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, AttrNone>) o += "None";
        else if constexpr (std::is_same_v<T, bool>) o += v ? "True" : "False";
        else if constexpr (std::is_same_v<T, std::string>) o += "'" + v + "'";
        else if constexpr (std::is_same_v<T, std::vector<int64_t>> || std::is_same_v<T, std::vector<double>>) {
          o += "[";
          for (size_t i = 0; i < v.size(); ++i) o += (i ? ", " : "") + number_text(v[i]);
          o += "]";
        } else if constexpr (std::is_same_v<T, DType>) o += dtype_name(v);
        else if constexpr (std::is_same_v<T, std::shared_ptr<const Array>>) {
          if (v) o += std::string("array ") + dtype_name(v->dtype) + shape_str(v->shape);
          else o += "null array";
        } else o += number_text(v);
      },
      a);
  return o;
}

}  // namespace mg
