// Shapes whose dims may be unknown (kUnknownDim) until specialisation.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mg {

constexpr int64_t kUnknownDim = -1;
using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& s);          // "(32, None)"
bool shape_known(const Shape& s);
int64_t num_elements(const Shape& s);            // -1 when unknown; throws on overflow
std::vector<int64_t> contiguous_strides(const Shape& s);  // in elements

// Checked size arithmetic. Every shape is checked where it is made (a node's outputs, a
// TensorData, a compiled feed type, a wrapped buffer), so element counts, byte counts and
// strides computed later from it cannot wrap: the product of its dims (zeros counted as 1,
// so strides fit too) times the item size is at most kMaxTensorBytes.
constexpr int64_t kMaxTensorBytes = int64_t(1) << 62;
// nullopt when a * b overflows int64 (a, b >= 0)
std::optional<int64_t> checked_mul(int64_t a, int64_t b);
// "" when the shape is fine, else why not (a dim < -1, an unknown dim where
// allow_unknown is false, or too many bytes)
std::string shape_problem(const Shape& s, size_t itemsize, bool allow_unknown);
// Raises GraphValueError "[op] shape (..) ...: why (node 'node')" for a bad shape.
void check_shape(const Shape& s, size_t itemsize, bool allow_unknown, const std::string& op,
                 const std::string& node = "");

// numpy broadcasting; nullopt when the shapes do not broadcast. Unknown dims broadcast
// optimistically and are checked again at specialisation.
std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b);

// Normalises an axis against rank (negative counts from the end); nullopt if out of range.
std::optional<int64_t> normalize_axis(int64_t axis, int64_t rank);

}  // namespace mg
