// Reverse-mode differentiation: appends the gradient graph to the same Graph.
#pragma once
#include <vector>

#include "core/graph.h"

namespace mg {

// d(y)/d(x) for each x, with dy as the seed (ones of y's shape when invalid). Returns one
// tensor per x (zeros where y does not depend on x). Built from ordinary ops, so the
// result can be differentiated again.
std::vector<ValueRef> gradients(Graph& g, ValueRef y, const std::vector<ValueRef>& xs, ValueRef dy = {});

}  // namespace mg
