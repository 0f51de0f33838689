// Typed attributes of the gather family (core/ops/gather.cpp): gather, gather_nd,
// gather_along_axis and the scatters, as kernels and lowerings read them with
// typed_attrs<GatherAttrs>(node) (core/typed_attrs.h).
#pragma once
#include <cstdint>

namespace mg::ops {

// MPSGraphScatterMode, in MPSGraph's order (Add = 0 ... Set = 6).
enum class ScatterMode { Add, Sub, Mul, Div, Min, Max, Set };

// How the indices address the result: one index per slice along `axis` (gather, scatter), a
// K-tuple per slice (the _nd forms), or one index per element (the _along_axis forms).
enum class IndexKind { Axis, ND, AlongAxis };

struct GatherAttrs {
  IndexKind kind = IndexKind::Axis;
  int64_t axis = 0;        // normalised (Axis, AlongAxis)
  int64_t batch_dims = 0;  // leading dims shared by the data and the indices (Axis, ND)
  ScatterMode mode = ScatterMode::Add;  // scatters only
  bool with_data = false;  // scatter onto a data input (else onto zeros of `shape`)
};

}  // namespace mg::ops
