#include <algorithm>

#include "core/shape.h"

#include <limits>

#include "core/error.h"

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

std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  if (a < 0 || b < 0) return std::nullopt;
  if (a != 0 && b > std::numeric_limits<int64_t>::max() / a) return std::nullopt;
  return a * b;
}

int64_t num_elements(const Shape& s) {
  int64_t n = 1;
  for (auto d : s)
    if (d < 0) return -1;
  for (auto d : s) {
    auto m = checked_mul(n, d);
    if (!m) throw GraphError(ErrorKind::Value, "[shape] the element count of " + shape_str(s) + " overflows");
    n = *m;
  }
  return n;
}

std::string shape_problem(const Shape& s, size_t itemsize, bool allow_unknown) {
  int64_t bytes = int64_t(itemsize ? itemsize : 1);
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == kUnknownDim) {
      if (!allow_unknown) return "dim " + std::to_string(i) + " is unknown (None) where a concrete shape is needed";
      continue;
    }
    if (s[i] < 0)
      return "dim " + std::to_string(i) + " is " + std::to_string(s[i]) +
             ": dims are non-negative (None marks a dim known only at run time)";
    auto m = checked_mul(bytes, s[i] == 0 ? 1 : s[i]);
    if (!m || *m > kMaxTensorBytes)
      return "is too large: its " + std::to_string(itemsize) + "-byte elements would need more than 2**62 bytes";
    bytes = *m;
  }
  return "";
}

void check_shape(const Shape& s, size_t itemsize, bool allow_unknown, const std::string& op, const std::string& node) {
  std::string why = shape_problem(s, itemsize, allow_unknown);
  if (!why.empty()) raise(ErrorKind::Value, op, node, "shape " + shape_str(s) + " " + (why.rfind("is ", 0) == 0 ? why : "is invalid: " + why));
}

std::vector<int64_t> contiguous_strides(const Shape& s) {
  std::vector<int64_t> st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    auto m = checked_mul(acc, s[i] < 0 ? 1 : s[i]);
    if (!m) throw GraphError(ErrorKind::Value, "[shape] the strides of " + shape_str(s) + " overflow");
    acc = *m;
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
