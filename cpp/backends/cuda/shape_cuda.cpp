// CUDA shape and creation kernels: every data movement is a strided copy (copy_kernels.cu)
// planned at compile time; fills for padding, gradients of slices and constants.
#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cuda/cuda_internal.h"
#include "core/error.h"
#include "core/ops/creation_attrs.h"
#include "core/ops/shape_attrs.h"
#include "core/ops/shape_ops.h"
#include "core/typed_attrs.h"

namespace mg::cuda {

using Ints = std::vector<int64_t>;

StridedCopy make_copy(size_t es, const Shape& shape, const Ints& ss, const Ints& ds, int64_t so, int64_t doff) {
  StridedCopy c;
  c.itemsize = int32_t(es);
  c.src_offset = so;
  c.dst_offset = doff;
  c.n = num_elements(shape);
  Ints sh, s, d;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    if (!sh.empty() && s.back() == ss[i] * shape[i] && d.back() == ds[i] * shape[i]) {
      sh.back() *= shape[i];
      s.back() = ss[i];
      d.back() = ds[i];
      continue;
    }
    sh.push_back(shape[i]);
    s.push_back(ss[i]);
    d.push_back(ds[i]);
  }
  if (sh.size() > size_t(kMaxRank)) raise(ErrorKind::NotImplemented, "cuda", "", "a copy over more than 8 dims");
  c.rank = int32_t(sh.size());
  for (size_t i = 0; i < sh.size(); ++i) {
    c.shape[i] = sh[i];
    c.src_stride[i] = s[i];
    c.dst_stride[i] = d[i];
  }
  if (c.rank == 0) {  // one element
    c.rank = 1;
    c.shape[0] = 1;
  }
  return c;
}

namespace {

size_t esize(const TensorType& t) { return dtype_size(t.dtype); }

// Non-constant pad modes: after the interior, each dim's two borders are copies within the
// output from the rows they mirror, repeat or wrap (core/ops/shape_ops.h pad_source). Dim d's
// borders span whole dims before d (already complete) and the interior of dims after it.
std::vector<StridedCopy> pad_borders(size_t es, const Shape& xs, const Shape& os, const Ints& left, ops::PadMode m) {
  std::vector<StridedCopy> r;
  if (num_elements(os) == 0) return r;
  const Ints st = contiguous_strides(os);
  for (size_t d = 0; d < xs.size(); ++d)
    for (const bool before : {true, false}) {
      const int64_t count = before ? left[d] : os[d] - xs[d] - left[d];
      if (count == 0) continue;
      Shape shape(xs.size());
      Ints src_st = st;
      int64_t base = 0;
      for (size_t k = 0; k < xs.size(); ++k) {
        const bool whole = k < d;
        shape[k] = whole ? os[k] : xs[k];
        base += whole ? 0 : left[k] * st[k];
      }
      const int64_t first = before ? -left[d] : xs[d];  // the first padded index, from the interior's start
      shape[d] = count;
      src_st[d] = ops::pad_source_step(m) * st[d];
      const int64_t dst = base + first * st[d];
      const int64_t src = base + ops::pad_source(m, xs[d], first) * st[d];
      r.push_back(make_copy(es, shape, src_st, st, src, dst));
    }
  return r;
}

LaunchFn copy_step(StridedCopy c) {
  return [c](cudaStream_t s, const void* const* in, void* const* out) { strided_copy(c, in[0], out[0], s); };
}

// The bytes of value v in dtype t, as a fill pattern.
uint64_t pattern(DType t, double v) {
  std::array<unsigned char, 8> b{};
  store_from_double(b.data(), t, 0, v);
  uint64_t p = 0;
  std::memcpy(&p, b.data(), 8);
  return p;
}

LaunchFn fill_step(const TensorType& t, double v) {
  const int64_t n = num_elements(t.shape);
  const int32_t es = int32_t(dtype_size(t.dtype));
  const uint64_t p = pattern(t.dtype, v);
  return [n, es, p](cudaStream_t s, const void* const*, void* const* out) { fill_bytes(out[0], n, es, p, s); };
}

LaunchFn permute(const KernelCtx& c, const Ints& perm) {
  const Shape& xs = c.in[0].shape;
  Ints st = contiguous_strides(xs), ss;
  for (auto p : perm) ss.push_back(st[size_t(p)]);
  return copy_step(make_copy(esize(c.in[0]), c.out[0].shape, ss, contiguous_strides(c.out[0].shape), 0, 0));
}

LaunchFn broadcast(const KernelCtx& c) {
  const Shape& xs = c.in[0].shape;
  const Shape& os = c.out[0].shape;
  Ints xst = contiguous_strides(xs), ss(os.size(), 0);
  const size_t lead = os.size() - xs.size();
  for (size_t i = 0; i < xs.size(); ++i) ss[lead + i] = xs[i] == 1 ? 0 : xst[i];
  return copy_step(make_copy(esize(c.in[0]), os, ss, contiguous_strides(os), 0, 0));
}

std::vector<ops::SliceDim> slice_dims(const Node& n, const Shape& in) {
  const ops::StridedSliceAttrs& a = typed_attrs<ops::StridedSliceAttrs>(n);
  std::vector<ops::SliceDim> r;
  for (size_t i = 0; i < in.size(); ++i) {
    if ((uint64_t(a.squeeze_mask) >> i) & 1u) r.push_back({a.starts[i] < 0 ? a.starts[i] + in[i] : a.starts[i], 1, 1});
    else
      r.push_back(ops::resolve_slice_dim(in[i], a.starts[i], a.ends[i], a.strides[i], (uint64_t(a.start_mask) >> i) & 1u,
                                         (uint64_t(a.end_mask) >> i) & 1u));
  }
  return r;
}

StridedCopy slice_copy(size_t es, const Shape& full, const std::vector<ops::SliceDim>& dims, bool scatter) {
  Ints st = contiguous_strides(full), counts, strided;
  int64_t off = 0;
  for (size_t i = 0; i < dims.size(); ++i) {
    counts.push_back(dims[i].count);
    strided.push_back(dims[i].step * st[i]);
    off += dims[i].start * st[i];
  }
  Ints dense = contiguous_strides(counts);
  if (scatter) return make_copy(es, counts, dense, strided, 0, off);
  return make_copy(es, counts, strided, dense, off, 0);
}

// Copies of several same-rank tensors into (concat, stack) or out of (split) one along an axis.
std::vector<StridedCopy> axis_copies(size_t es, const Shape& whole, const std::vector<Shape>& parts, size_t axis, bool into) {
  std::vector<StridedCopy> r;
  Ints wst = contiguous_strides(whole);
  int64_t at = 0;
  for (auto& p : parts) {
    Ints pst = contiguous_strides(p);
    const int64_t off = at * wst[axis];
    r.push_back(into ? make_copy(es, p, pst, wst, 0, off) : make_copy(es, p, wst, pst, off, 0));
    at += p[axis];
  }
  return r;
}

}  // namespace

void register_shape_kernels() {
  for (const char* op : {"transpose", "swap_axes"})
    register_kernel(op, [](const KernelCtx& c) { return permute(c, permutation_of(c.node)); });
  register_kernel("broadcast_to", broadcast);
  register_kernel("broadcast_like", broadcast);
  register_kernel("slice", [](const KernelCtx& c) {
    const Shape& xs = c.in[0].shape;
    const ops::SliceAttrs& a = typed_attrs<ops::SliceAttrs>(c.node);
    const size_t d = size_t(a.axis);
    const int64_t start = a.start < 0 ? a.start + xs[d] : a.start;
    Ints st = contiguous_strides(xs);
    return copy_step(make_copy(esize(c.in[0]), c.out[0].shape, st, contiguous_strides(c.out[0].shape), start * st[d], 0));
  });
  register_kernel("strided_slice", [](const KernelCtx& c) {
    return copy_step(slice_copy(esize(c.in[0]), c.in[0].shape, slice_dims(c.node, c.in[0].shape), false));
  });
  register_kernel("slice_gradient", [](const KernelCtx& c) -> LaunchFn {
    const StridedCopy cp = slice_copy(esize(c.out[0]), c.out[0].shape, slice_dims(c.node, c.out[0].shape), true);
    LaunchFn zero = fill_step(c.out[0], 0.0);
    return [cp, zero](cudaStream_t s, const void* const* in, void* const* out) {
      zero(s, in, out);
      strided_copy(cp, in[0], out[0], s);
    };
  });
  register_kernel("reverse", [](const KernelCtx& c) {
    const Shape& xs = c.in[0].shape;
    Ints st = contiguous_strides(xs), ss = st;
    int64_t off = 0;
    for (auto a : typed_attrs<ops::ReverseAttrs>(c.node).axes) {
      ss[size_t(a)] = -st[size_t(a)];
      if (xs[size_t(a)] > 0) off += (xs[size_t(a)] - 1) * st[size_t(a)];
    }
    return copy_step(make_copy(esize(c.in[0]), xs, ss, st, off, 0));
  });
  register_kernel("tile", [](const KernelCtx& c) {
    const Shape& xs = c.in[0].shape;
    const Ints& m = typed_attrs<ops::TileAttrs>(c.node).multiples;
    Ints xst = contiguous_strides(xs);
    Shape inter;
    Ints ss;
    for (size_t i = 0; i < xs.size(); ++i) {
      inter.push_back(m[i]);
      ss.push_back(0);
      inter.push_back(xs[i]);
      ss.push_back(xst[i]);
    }
    return copy_step(make_copy(esize(c.in[0]), inter, ss, contiguous_strides(inter), 0, 0));
  });
  register_kernel("pad", [](const KernelCtx& c) -> LaunchFn {
    const Shape& xs = c.in[0].shape;
    const Shape& os = c.out[0].shape;
    const ops::PadAttrs& a = typed_attrs<ops::PadAttrs>(c.node);
    Ints ost = contiguous_strides(os);
    int64_t off = 0;
    for (size_t i = 0; i < xs.size(); ++i) off += a.left_padding[i] * ost[i];
    const StridedCopy cp = make_copy(esize(c.out[0]), xs, contiguous_strides(xs), ost, 0, off);
    if (a.mode != ops::PadMode::Constant) {
      std::vector<StridedCopy> borders = pad_borders(esize(c.out[0]), xs, os, a.left_padding, a.mode);
      return [cp, borders](cudaStream_t s, const void* const* in, void* const* out) {
        strided_copy(cp, in[0], out[0], s);
        for (const StridedCopy& b : borders) strided_copy(b, out[0], out[0], s);  // in order: later borders read earlier ones
      };
    }
    LaunchFn fill = fill_step(c.out[0], a.constant_value);
    return [cp, fill](cudaStream_t s, const void* const* in, void* const* out) {
      fill(s, in, out);
      strided_copy(cp, in[0], out[0], s);
    };
  });
  register_kernel("concat", [](const KernelCtx& c) -> LaunchFn {
    std::vector<Shape> parts;
    for (auto& t : c.in) parts.push_back(t.shape);
    auto cps = axis_copies(esize(c.out[0]), c.out[0].shape, parts, size_t(typed_attrs<ops::AxisAttrs>(c.node).axis), true);
    return [cps](cudaStream_t s, const void* const* in, void* const* out) {
      for (size_t k = 0; k < cps.size(); ++k) strided_copy(cps[k], in[k], out[0], s);
    };
  });
  register_kernel("stack", [](const KernelCtx& c) -> LaunchFn {
    const size_t ax = size_t(typed_attrs<ops::AxisAttrs>(c.node).axis);
    Shape part = c.out[0].shape;
    part[ax] = 1;
    std::vector<Shape> parts(c.in.size(), part);
    auto cps = axis_copies(esize(c.out[0]), c.out[0].shape, parts, ax, true);
    return [cps](cudaStream_t s, const void* const* in, void* const* out) {
      for (size_t k = 0; k < cps.size(); ++k) strided_copy(cps[k], in[k], out[0], s);
    };
  });
  auto split = [](const KernelCtx& c) -> LaunchFn {
    std::vector<Shape> parts;
    for (auto& t : c.out) parts.push_back(t.shape);
    auto cps = axis_copies(esize(c.in[0]), c.in[0].shape, parts, size_t(typed_attrs<ops::AxisAttrs>(c.node).axis), false);
    return [cps](cudaStream_t s, const void* const* in, void* const* out) {
      for (size_t k = 0; k < cps.size(); ++k) strided_copy(cps[k], in[0], out[k], s);
    };
  };
  register_kernel("split", split);
  register_kernel("split_like", split);
  auto copy = [](const KernelCtx& c) -> LaunchFn {
    const Shape& s = c.out[0].shape;
    return copy_step(make_copy(esize(c.out[0]), s, contiguous_strides(s), contiguous_strides(s), 0, 0));
  };
  for (const char* op : {"identity", "stop_gradient", "reshape", "reshape_like", "expand_dims", "squeeze", "flatten", "flatten_2d"})
    register_kernel(op, copy);
  register_kernel("zeros", [](const KernelCtx& c) { return fill_step(c.out[0], 0.0); });
  register_kernel("ones", [](const KernelCtx& c) { return fill_step(c.out[0], 1.0); });
  register_kernel("full", [](const KernelCtx& c) { return fill_step(c.out[0], typed_attrs<ops::FillAttrs>(c.node).value); });
  register_kernel("full_like", [](const KernelCtx& c) { return fill_step(c.out[0], typed_attrs<ops::FillAttrs>(c.node).value); });
}

}  // namespace mg::cuda
