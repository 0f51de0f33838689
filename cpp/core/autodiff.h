// Reverse-mode differentiation: appends the gradient graph to the same Graph.
#pragma once
#include <cstdint>
#include <vector>

#include "core/graph.h"

namespace mg {

// d(y)/d(x) for each x, with dy as the seed (ones of y's shape when invalid). Returns one
// tensor per x (zeros where y does not depend on x). Built from ordinary ops, so the
// result can be differentiated again.
std::vector<ValueRef> gradients(Graph& g, ValueRef y, const std::vector<ValueRef>& xs, ValueRef dy = {});

// The vector-Jacobian product of ys at dys (an invalid dy is zero) w.r.t. xs, over the
// nodes from `first` on; earlier nodes are leaves. One result per x, invalid where no path
// leads from it to a y. Control-flow gradient rules use it on the bodies they inline.
std::vector<ValueRef> vjp(Graph& g, const std::vector<ValueRef>& ys, const std::vector<ValueRef>& dys,
                          const std::vector<ValueRef>& xs, int32_t first);

}  // namespace mg
