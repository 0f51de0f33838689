// Shape-family helpers shared by the op definitions (core/ops/shape.cpp) and the backends'
// kernels: how a strided slice resolves against a concrete dim, which input element a
// padded element reads, and how space_to_depth_2d/depth_to_space_2d index their tensors.
#pragma once
#include <cstdint>
#include <string>

namespace mg::ops {

// One dim of a strided slice resolved against a known size n >= 0: the elements taken are
// start, start + step, ... (count of them). A squeezed dim takes one element (count 1).
struct SliceDim {
  int64_t start = 0;
  int64_t step = 1;
  int64_t count = 0;
};

// Python slice semantics with clamping (slice.indices). begin/end masks mean "from the
// beginning" / "to the end" (for negative steps: from the last element / to before the first).
// step must not be 0. Never overflows, whatever the inputs.
inline SliceDim resolve_slice_dim(int64_t n, int64_t start, int64_t end, int64_t step, bool start_mask,
                                  bool end_mask) {
  SliceDim r;
  r.step = step;
  auto norm = [n](int64_t v, int64_t lo, int64_t hi) {  // negative counts from the end, then clamp
    if (v < 0) v = v + n;                                // v >= INT64_MIN, n >= 0: no overflow
    return v < lo ? lo : v > hi ? hi : v;
  };
  uint64_t mag;
  int64_t lo, hi;
  if (step > 0) {
    lo = start_mask ? 0 : norm(start, 0, n);
    hi = end_mask ? n : norm(end, 0, n);
    r.start = lo;
    mag = uint64_t(step);
    r.count = hi > lo ? int64_t(1 + uint64_t(hi - lo - 1) / mag) : 0;
  } else {
    hi = start_mask ? n - 1 : norm(start, -1, n - 1);
    lo = end_mask ? -1 : norm(end, -1, n - 1);
    r.start = hi;
    mag = uint64_t(0) - uint64_t(step);
    r.count = hi > lo ? int64_t(1 + uint64_t(hi - lo - 1) / mag) : 0;
  }
  if (r.count <= 1) r.step = 1;  // keeps offset arithmetic small for huge steps
  if (r.count == 0) r.start = 0;
  return r;
}

// ---- pad ----

// Padding modes. numpy names; MPSGraph's Constant, Reflect, Symmetric, ClampToEdge, Periodic.
enum class PadMode { Constant, Reflect, Symmetric, Edge, Wrap };

// The canonical name's mode; false for an unknown name. Accepts the aliases
// "clamp_to_edge" (edge) and "periodic"/"circular" (wrap).
inline bool parse_pad_mode(const std::string& s, PadMode& m) {
  if (s == "constant") m = PadMode::Constant;
  else if (s == "reflect") m = PadMode::Reflect;
  else if (s == "symmetric") m = PadMode::Symmetric;
  else if (s == "edge" || s == "clamp_to_edge") m = PadMode::Edge;
  else if (s == "wrap" || s == "periodic" || s == "circular") m = PadMode::Wrap;
  else return false;
  return true;
}
inline const char* pad_mode_name(PadMode m) {
  switch (m) {
    case PadMode::Constant: return "constant";
    case PadMode::Reflect: return "reflect";
    case PadMode::Symmetric: return "symmetric";
    case PadMode::Edge: return "edge";
    case PadMode::Wrap: return "wrap";
  }
  return "constant";
}

// The largest padding (per side) a dim of size n >= 0 allows: numpy's single-reflection
// limits (reflect: < n, symmetric and wrap: <= n, edge: any once n >= 1). -1: unlimited.
inline int64_t max_pad(PadMode m, int64_t n) {
  switch (m) {
    case PadMode::Constant: return -1;
    case PadMode::Reflect: return n > 0 ? n - 1 : 0;
    case PadMode::Symmetric: case PadMode::Wrap: return n;
    case PadMode::Edge: return n > 0 ? -1 : 0;
  }
  return -1;
}

// The input index read by position j of a padded dim of size n (j in [-left, n + right),
// 0 = the first input element), for paddings within max_pad. -1 for constant padding.
inline int64_t pad_source(PadMode m, int64_t n, int64_t j) {
  if (j >= 0 && j < n) return j;
  switch (m) {
    case PadMode::Constant: return -1;
    case PadMode::Reflect: return j < 0 ? -j : 2 * (n - 1) - j;
    case PadMode::Symmetric: return j < 0 ? -j - 1 : 2 * n - 1 - j;
    case PadMode::Edge: return j < 0 ? 0 : n - 1;
    case PadMode::Wrap: return j < 0 ? j + n : j - n;
  }
  return -1;
}
// How the source index moves as j grows through a border: -1 (mirrors), 0 (edge), +1 (wrap).
inline int64_t pad_source_step(PadMode m) {
  return m == PadMode::Edge ? 0 : m == PadMode::Wrap ? 1 : -1;
}

// ---- space_to_depth_2d / depth_to_space_2d ----

// Both ops move the same elements between a "space" tensor S (N, H, W, C) or (N, C, H, W)
// and a "depth" tensor D (N, H/b, W/b, C*b*b) or (N, C*b*b, H/b, W/b). Element (n, c, h, w,
// i, j) (i, j: offsets inside a b x b block, j along W fastest) is S[n, h*b + i, w*b + j, c]
// and D[n, h, w, depth] with
//   pixel-shuffle order (PyTorch pixel_unshuffle, ONNX CRD): depth = (c * b + i) * b + j
//   otherwise (TensorFlow space_to_depth, ONNX DCR):          depth = (i * b + j) * C + c
// Given the space tensor's shape, view6 is the depth tensor seen as six dims in its own
// row-major order and space_strides the space tensor's strides for those six dims.
inline void space_depth_view(const int64_t* space, bool nchw, bool pixel_shuffle, int64_t b, int64_t* view6,
                             int64_t* space_strides) {
  const int64_t N = space[0], H = nchw ? space[2] : space[1], W = nchw ? space[3] : space[2],
                C = nchw ? space[1] : space[3];
  // strides of the space tensor per logical dim n, c, h, w (element units)
  const int64_t sn = H * W * C, sc = nchw ? H * W : 1, sh = nchw ? W : W * C, sw = nchw ? 1 : C;
  struct D { int64_t size, stride; };
  const D n{N, sn}, c{C, sc}, h{H / b, sh * b}, w{W / b, sw * b}, i{b, sh}, j{b, sw};
  D v[6];
  if (nchw) {
    if (pixel_shuffle) { v[0] = n; v[1] = c; v[2] = i; v[3] = j; v[4] = h; v[5] = w; }
    else { v[0] = n; v[1] = i; v[2] = j; v[3] = c; v[4] = h; v[5] = w; }
  } else {
    if (pixel_shuffle) { v[0] = n; v[1] = h; v[2] = w; v[3] = c; v[4] = i; v[5] = j; }
    else { v[0] = n; v[1] = h; v[2] = w; v[3] = i; v[4] = j; v[5] = c; }
  }
  for (int k = 0; k < 6; ++k) {
    view6[k] = v[k].size;
    space_strides[k] = v[k].stride;
  }
}

// The copy of one into the other (to_depth: space into depth) over view6, with the source's and
// the destination's strides (the depth tensor is contiguous in view6's order).
inline void space_depth_copy(const int64_t* space, bool nchw, bool pixel_shuffle, int64_t b, bool to_depth, int64_t* view6,
                             int64_t* src_strides, int64_t* dst_strides) {
  int64_t sst[6], dense[6];
  space_depth_view(space, nchw, pixel_shuffle, b, view6, sst);
  dense[5] = 1;
  for (int k = 4; k >= 0; --k) dense[k] = dense[k + 1] * view6[k + 1];
  for (int k = 0; k < 6; ++k) {
    src_strides[k] = to_depth ? sst[k] : dense[k];
    dst_strides[k] = to_depth ? dense[k] : sst[k];
  }
}

}  // namespace mg::ops
