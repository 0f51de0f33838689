#include <algorithm>

#include "core/shape.h"

namespace mg {

std::string shape_str(const Shape& s) {
  std::string r = "(";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ", ";
    r += s[i] == kUnknownDim ? "None" : std::to_string(s[i]);  // other negatives are bad input: show them
  }
  if (s.size() == 1) r += ",";
  return r + ")";
}

bool shape_known(const Shape& s) {
  for (auto d : s)
    if (d < 0) return false;
  return true;
}

int64_t num_elements(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) {
    if (d < 0) return -1;
    n *= d;
  }
  return n;
}

std::vector<int64_t> contiguous_strides(const Shape& s) {
  std::vector<int64_t> st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= s[i] < 0 ? 1 : s[i];
  }
  return st;
}

std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape r(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da == db) r[i] = da;
    else if (da == 1) r[i] = db;
    else if (db == 1) r[i] = da;
    else if (da < 0) r[i] = db;   // unknown vs known: assume it matches, checked later
    else if (db < 0) r[i] = da;
    else return std::nullopt;
  }
  return r;
}

std::optional<int64_t> normalize_axis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank) return std::nullopt;
  return axis < 0 ? axis + rank : axis;
}

}  // namespace mg
