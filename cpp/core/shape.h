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
int64_t num_elements(const Shape& s);            // -1 when unknown
std::vector<int64_t> contiguous_strides(const Shape& s);  // in elements

// numpy broadcasting; nullopt when the shapes do not broadcast. Unknown dims broadcast
// optimistically and are checked again at specialisation.
std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b);

// Normalises an axis against rank (negative counts from the end); nullopt if out of range.
std::optional<int64_t> normalize_axis(int64_t axis, int64_t rank);

}  // namespace mg
