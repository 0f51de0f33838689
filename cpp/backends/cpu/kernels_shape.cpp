// CPU kernels for the shape family. Reshape-like ops are a memcpy; everything else is one
// generic strided copy (per dim: a count, a source stride and a destination stride, plus
// base offsets), planned in the factory: transpose, broadcast, slices, reverse, tile and
// space_to_depth_2d read through strides; pad, concat, stack, slice_gradient and
// depth_to_space_2d write through them. Reflect/symmetric/edge/wrap padding fills the border
// with one strided copy per dim and side inside the output. Copies move elements by size,
// so one loop serves every dtype; band_part and one_hot are byte loops too. The sums
// (tile_gradient, pad_gradient) compute in Num<S>::C.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "backends/cpu/elementwise_util.h"
#include "core/ops/shape_attrs.h"

namespace mg::cpu {

namespace {

using Ints = std::vector<int64_t>;

constexpr int64_t kGrain = 32768;  // elements per parallel chunk, at least

struct CopyPlan {
  size_t es = 1;                  // element size in bytes
  Ints shape, ss, ds;             // collapsed; rank >= 1 unless total == 0
  int64_t soff = 0, doff = 0;     // element offsets of the first element
  int64_t total = 0;
  int tile_dim = -1;              // a dim read contiguously while the last is written so: copy in tiles
};

CopyPlan make_copy_plan(size_t es, const Ints& shape, const Ints& ss, const Ints& ds, int64_t soff, int64_t doff) {
  CopyPlan p;
  p.es = es;
  p.soff = soff;
  p.doff = doff;
  p.total = 1;
  for (auto d : shape) p.total *= d;
  if (p.total == 0) return p;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;  // strides of a single-element dim never matter
    if (!p.shape.empty() && p.ss.back() == ss[i] * shape[i] && p.ds.back() == ds[i] * shape[i]) {
      p.shape.back() *= shape[i];  // merge with the outer dim
      p.ss.back() = ss[i];
      p.ds.back() = ds[i];
      continue;
    }
    p.shape.push_back(shape[i]);
    p.ss.push_back(ss[i]);
    p.ds.push_back(ds[i]);
  }
  if (p.shape.size() > 128) raise(ErrorKind::NotImplemented, "copy", "", "tensors of rank above 128 are not supported");
  if (p.shape.empty()) {
    p.shape = {1};
    p.ss = {1};
    p.ds = {1};
  }
  // A transpose-like copy (reads strided along the last dim, which writes contiguously, while
  // another dim reads contiguously) goes through cache-sized tiles of those two dims.
  const size_t last = p.shape.size() - 1;
  if (p.ss[last] != 1 && p.ds[last] == 1 && p.shape[last] >= 8)
    for (size_t i = 0; i < last; ++i)
      if (p.ss[i] == 1 && p.shape[i] >= 8) p.tile_dim = int(i);
  return p;
}

template <class T>
void strided_run(const char* src, char* dst, int64_t n, int64_t is, int64_t id) {
  const T* s = reinterpret_cast<const T*>(src);
  T* d = reinterpret_cast<T*>(dst);
  if (id == 1) {
    for (int64_t k = 0; k < n; ++k) d[k] = s[k * is];
  } else {
    for (int64_t k = 0; k < n; ++k) d[k * id] = s[k * is];
  }
}

// Copies n elements from src (stride is) to dst (stride id); offsets already applied.
inline void copy_run(const CopyPlan& p, const char* src, char* dst, int64_t n) {
  const int64_t is = p.ss.back(), id = p.ds.back();
  if (is == 1 && id == 1) {
    std::memcpy(dst, src, size_t(n) * p.es);
    return;
  }
  switch (p.es) {
    case 1: strided_run<uint8_t>(src, dst, n, is, id); break;
    case 2: strided_run<uint16_t>(src, dst, n, is, id); break;
    case 4: strided_run<uint32_t>(src, dst, n, is, id); break;
    case 8: strided_run<uint64_t>(src, dst, n, is, id); break;
    default:
      for (int64_t k = 0; k < n; ++k)
        std::memcpy(dst + k * id * int64_t(p.es), src + k * is * int64_t(p.es), p.es);
  }
}

// dst[i * dt + j] = src[i + j * sl] for i < ni, j < nj (element type T).
template <class T>
void tile_block(const char* src, char* dst, int64_t ni, int64_t nj, int64_t dt, int64_t sl) {
  const T* s = reinterpret_cast<const T*>(src);
  T* d = reinterpret_cast<T*>(dst);
  for (int64_t i = 0; i < ni; ++i)
    for (int64_t j = 0; j < nj; ++j) d[i * dt + j] = s[i + j * sl];
}

void run_tiled(const CopyPlan& p, const char* src, char* dst) {
  constexpr int64_t B = 32;
  const int64_t es = int64_t(p.es);
  const size_t t = size_t(p.tile_dim), last = p.shape.size() - 1;
  const int64_t nt = p.shape[t], nl = p.shape[last];
  const int64_t bt = (nt + B - 1) / B, bl = (nl + B - 1) / B;
  const int64_t outer = p.total / (nt * nl);
  const int64_t tasks = outer * bt * bl;
  parallel_for(tasks, std::max<int64_t>(1, kGrain / (B * B)), [&](int64_t tb, int64_t te) {
    for (int64_t task = tb; task < te; ++task) {
      int64_t rem = task;
      const int64_t jl = rem % bl;
      rem /= bl;
      const int64_t it = rem % bt;
      rem /= bt;
      int64_t so = 0, dof = 0;
      for (size_t d = last; d-- > 0;) {
        if (d == t) continue;
        const int64_t idx = rem % p.shape[d];
        rem /= p.shape[d];
        so += idx * p.ss[d];
        dof += idx * p.ds[d];
      }
      const int64_t i0 = it * B, j0 = jl * B;
      so += i0 * p.ss[t] + j0 * p.ss[last];
      dof += i0 * p.ds[t] + j0 * p.ds[last];
      const int64_t ni = std::min(B, nt - i0), nj = std::min(B, nl - j0);
      const char* s = src + so * es;
      char* d = dst + dof * es;
      switch (p.es) {
        case 1: tile_block<uint8_t>(s, d, ni, nj, p.ds[t], p.ss[last]); break;
        case 2: tile_block<uint16_t>(s, d, ni, nj, p.ds[t], p.ss[last]); break;
        case 4: tile_block<uint32_t>(s, d, ni, nj, p.ds[t], p.ss[last]); break;
        case 8: tile_block<uint64_t>(s, d, ni, nj, p.ds[t], p.ss[last]); break;
        default:
          for (int64_t i = 0; i < ni; ++i)
            for (int64_t j = 0; j < nj; ++j)
              std::memcpy(d + (i * p.ds[t] + j) * es, s + (i + j * p.ss[last]) * es, p.es);
      }
    }
  });
}

void run_copy(const CopyPlan& p, const void* src_v, void* dst_v) {
  if (p.total == 0) return;
  const int64_t es = int64_t(p.es);
  const char* src = static_cast<const char*>(src_v) + p.soff * es;
  char* dst = static_cast<char*>(dst_v) + p.doff * es;
  if (p.tile_dim >= 0) {
    run_tiled(p, src, dst);
    return;
  }
  const int64_t inner = p.shape.back();
  if (p.shape.size() == 1) {
    parallel_for(inner, kGrain, [&](int64_t b, int64_t e) {
      copy_run(p, src + b * p.ss[0] * es, dst + b * p.ds[0] * es, e - b);
    });
    return;
  }
  const int64_t rows = p.total / inner;
  const size_t outer = p.shape.size() - 1;
  parallel_for(rows, std::max<int64_t>(1, kGrain / inner), [&](int64_t rb, int64_t re) {
    int64_t idx[128];
    int64_t so = 0, dof = 0, rem = rb;
    for (size_t d = outer; d-- > 0;) {
      idx[d] = rem % p.shape[d];
      rem /= p.shape[d];
      so += idx[d] * p.ss[d];
      dof += idx[d] * p.ds[d];
    }
    for (int64_t r = rb; r < re; ++r) {
      copy_run(p, src + so * es, dst + dof * es, inner);
      for (size_t d = outer; d-- > 0;) {  // odometer step
        so += p.ss[d];
        dof += p.ds[d];
        if (++idx[d] < p.shape[d]) break;
        so -= p.ss[d] * p.shape[d];
        dof -= p.ds[d] * p.shape[d];
        idx[d] = 0;
      }
    }
  });
}

void par_memcpy(void* dst, const void* src, size_t nbytes) {
  if (nbytes == 0) return;
  parallel_for(int64_t(nbytes), int64_t(1) << 20, [&](int64_t b, int64_t e) {
    std::memcpy(static_cast<char*>(dst) + b, static_cast<const char*>(src) + b, size_t(e - b));
  });
}

// Fills n elements with the element whose bytes are `value`.
void fill(void* dst, int64_t n, size_t es, const unsigned char* value) {
  if (n == 0) return;
  bool zero = true;
  for (size_t k = 0; k < es; ++k) zero = zero && value[k] == 0;
  if (zero) {
    parallel_for(n, kGrain * 4, [&](int64_t b, int64_t e) {
      std::memset(static_cast<char*>(dst) + b * int64_t(es), 0, size_t(e - b) * es);
    });
    return;
  }
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
    auto run = [&](auto tag) {
      using T = decltype(tag);
      T v;
      std::memcpy(&v, value, sizeof(T));
      T* d = static_cast<T*>(dst);
      for (int64_t k = b; k < e; ++k) d[k] = v;
    };
    switch (es) {
      case 1: run(uint8_t{}); break;
      case 2: run(uint16_t{}); break;
      case 4: run(uint32_t{}); break;
      default: run(uint64_t{}); break;
    }
  });
}

size_t esize(const TensorType& t) { return dtype_size(t.dtype); }
int64_t count(const TensorType& t) { return num_elements(t.shape); }

KernelFn memcpy_kernel(const KernelCtx& c) {
  const size_t nbytes = size_t(count(c.out[0])) * esize(c.out[0]);
  return [nbytes](const void* const* in, void* const* out) { par_memcpy(out[0], in[0], nbytes); };
}

KernelFn gather_kernel(CopyPlan plan) {
  return [plan = std::move(plan)](const void* const* in, void* const* out) { run_copy(plan, in[0], out[0]); };
}

// Output of one input, read through the input's strides permuted by perm.
KernelFn permute_kernel(const KernelCtx& c, const Ints& perm) {
  Ints st = contiguous_strides(c.in[0].shape), ss;
  for (auto p : perm) ss.push_back(st[size_t(p)]);
  return gather_kernel(make_copy_plan(esize(c.in[0]), c.out[0].shape, ss, contiguous_strides(c.out[0].shape), 0, 0));
}

// The per-dim selection of a strided slice on `in` (squeezed dims kept with count 1).
std::vector<ops::SliceDim> slice_dims(const Node& n, const Shape& in) {
  const ops::StridedSliceAttrs& a = typed_attrs<ops::StridedSliceAttrs>(n);
  const Ints& starts = a.starts;
  const Ints& ends = a.ends;
  const Ints& strides = a.strides;
  const uint64_t sm = uint64_t(a.start_mask);
  const uint64_t em = uint64_t(a.end_mask);
  const uint64_t qm = uint64_t(a.squeeze_mask);
  std::vector<ops::SliceDim> r;
  for (size_t i = 0; i < in.size(); ++i) {
    if ((qm >> i) & 1u) {
      int64_t idx = starts[i] < 0 ? starts[i] + in[i] : starts[i];
      r.push_back({idx, 1, 1});
    } else {
      r.push_back(ops::resolve_slice_dim(in[i], starts[i], ends[i], strides[i], (sm >> i) & 1u, (em >> i) & 1u));
    }
  }
  return r;
}

// Reads (gather) or writes (scatter) the selected elements of a tensor of shape `full`.
CopyPlan slice_plan(size_t es, const Shape& full, const std::vector<ops::SliceDim>& dims, bool scatter) {
  Ints st = contiguous_strides(full), counts, strided;
  int64_t off = 0;
  for (size_t i = 0; i < dims.size(); ++i) {
    counts.push_back(dims[i].count);
    strided.push_back(dims[i].step * st[i]);
    off += dims[i].start * st[i];
  }
  Ints dense = contiguous_strides(counts);
  if (scatter) return make_copy_plan(es, counts, dense, strided, 0, off);
  return make_copy_plan(es, counts, strided, dense, off, 0);
}

// Copies each of several same-rank tensors into (concat/stack) or out of (split) a tensor
// along one axis, at running offsets.
struct AxisCopies {
  std::vector<CopyPlan> plans;
};
AxisCopies axis_copies(size_t es, const Shape& whole, const std::vector<Shape>& parts, size_t axis, bool into) {
  AxisCopies r;
  Ints wst = contiguous_strides(whole);
  int64_t at = 0;
  for (auto& s : parts) {
    Ints pst = contiguous_strides(s);
    int64_t off = at * wst[axis];
    r.plans.push_back(into ? make_copy_plan(es, s, pst, wst, 0, off) : make_copy_plan(es, s, wst, pst, off, 0));
    at += s[axis];
  }
  return r;
}

template <class S>
KernelFn tile_gradient_loop(const Shape& like, const Ints& mult) {
  using C = typename Num<S>::C;
  // dy viewed as (m0, d0, m1, d1, ...), output as (d0, d1, ...)
  const size_t r = like.size();
  Shape inter;
  for (size_t i = 0; i < r; ++i) {
    inter.push_back(mult[i]);
    inter.push_back(like[i]);
  }
  Ints ist = contiguous_strides(inter);
  Ints mshape(mult.begin(), mult.end()), mstride, dstride;
  for (size_t i = 0; i < r; ++i) {
    mstride.push_back(ist[2 * i]);
    dstride.push_back(ist[2 * i + 1]);
  }
  if (r > 64) raise(ErrorKind::NotImplemented, "tile_gradient", "", "tensors of rank above 64 are not supported");
  int64_t out_n = num_elements(like), reps = 1;
  for (auto m : mult) reps *= m;
  const int64_t inner = r ? like.back() : 1;
  const int64_t rows = inner ? out_n / inner : 0;
  return [=](const void* const* in, void* const* out) {
    const S* dy = static_cast<const S*>(in[0]);
    S* y = static_cast<S*>(out[0]);
    if (out_n == 0) return;
    if (reps == 0) {
      for (int64_t k = 0; k < out_n; ++k) y[k] = Num<S>::st(C(0));
      return;
    }
    const int64_t dinner = r ? dstride.back() : 1;  // == 1
    parallel_for(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, inner * reps)), [&](int64_t rb, int64_t re) {
      constexpr int64_t B = 256;
      C acc[B];
      int64_t midx[64];
      for (int64_t row = rb; row < re; ++row) {
        int64_t base = 0, rem = row;
        for (size_t d = r >= 1 ? r - 1 : 0; d-- > 0;) {
          base += (rem % like[d]) * dstride[d];
          rem /= like[d];
        }
        for (int64_t b0 = 0; b0 < inner; b0 += B) {
          const int64_t nb = std::min(B, inner - b0);
          for (int64_t t = 0; t < nb; ++t) acc[t] = C(0);
          for (size_t d = 0; d < r; ++d) midx[d] = 0;
          int64_t moff = 0;
          for (int64_t k = 0; k < reps; ++k) {
            const S* p = dy + base + moff + b0 * dinner;
            for (int64_t t = 0; t < nb; ++t) acc[t] += Num<S>::ld(p[t * dinner]);
            for (size_t d = r; d-- > 0;) {  // odometer over the multiples
              moff += mstride[d];
              if (++midx[d] < mshape[d]) break;
              moff -= mstride[d] * mshape[d];
              midx[d] = 0;
            }
          }
          S* q = y + row * inner + b0;
          for (int64_t t = 0; t < nb; ++t) q[t] = Num<S>::st(acc[t]);
        }
      }
    });
  };
}

// ---- pad (non-constant modes) and pad_gradient ----

// The border of a padded tensor, filled after the interior: dim by dim, one strided copy per
// side inside the output. When dim d is filled, dims before it are complete (whole extent)
// and dims after it hold the interior only, which is all a border slab of dim d reads.
std::vector<CopyPlan> pad_border_plans(size_t es, const Shape& xs, const Shape& os, const Ints& l, ops::PadMode m) {
  std::vector<CopyPlan> plans;
  if (num_elements(os) == 0) return plans;
  const Ints ost = contiguous_strides(os);
  const size_t r = xs.size();
  for (size_t d = 0; d < r; ++d) {
    const int64_t n = xs[d];
    for (int side = 0; side < 2; ++side) {
      const int64_t cnt = side == 0 ? l[d] : os[d] - n - l[d];
      if (cnt == 0) continue;
      Ints shape(r), ss(r), ds(r);
      int64_t soff = 0, doff = 0;
      for (size_t k = 0; k < r; ++k) {
        if (k == d) continue;
        shape[k] = k < d ? os[k] : xs[k];
        const int64_t start = k < d ? 0 : l[k];
        soff += start * ost[k];
        doff += start * ost[k];
        ss[k] = ds[k] = ost[k];
      }
      const int64_t j0 = side == 0 ? -l[d] : n;  // first padded position, relative to the interior
      shape[d] = cnt;
      ds[d] = ost[d];
      ss[d] = ops::pad_source_step(m) * ost[d];
      doff += (j0 + l[d]) * ost[d];
      soff += (ops::pad_source(m, n, j0) + l[d]) * ost[d];
      plans.push_back(make_copy_plan(es, shape, ss, ds, soff, doff));
    }
  }
  return plans;
}

// Calls fn(item, base) for every index of `counts` (row-major item number, and the offset
// sum of index * stride plus off), split over threads, `work` elements per item.
template <class F>
void for_each_index(const Ints& counts, const Ints& strides, int64_t off, int64_t work, F&& fn) {
  int64_t n = 1;
  for (auto c : counts) n *= c;
  if (n == 0) return;
  parallel_for(n, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, work)), [&](int64_t b, int64_t e) {
    for (int64_t item = b; item < e; ++item) {
      int64_t base = off, rem = item;
      for (size_t k = counts.size(); k-- > 0;) {
        base += (rem % counts[k]) * strides[k];
        rem /= counts[k];
      }
      fn(item, base);
    }
  });
}

// pad_gradient: dy (the padded shape) is copied to scratch in the compute type, then the
// border of each dim is added into the interior element it was copied from (dim by dim: when
// dim d is folded, dims before it are interior-only already, dims after it still whole), and
// the interior is the result. Constant padding just reads the interior.
template <class S>
KernelFn pad_gradient_loop(const Shape& ds, const Shape& xs, const Ints& l, ops::PadMode m) {
  using C = typename Num<S>::C;
  const size_t r = xs.size();
  const Ints st = contiguous_strides(ds);
  const int64_t n_dy = num_elements(ds), n_out = num_elements(xs);
  // the result, row by row: rows of xs' last dim inside dy (or the scratch copy)
  Ints rows(xs.begin(), xs.end()), rstrides(st.begin(), st.end());
  int64_t roff = 0;
  for (size_t k = 0; k < r; ++k) roff += l[k] * st[k];
  const int64_t run = r ? xs.back() : 1;
  if (r) {
    rows.pop_back();
    rstrides.pop_back();
  }
  struct Fold {
    Ints counts, strides;
    int64_t off = 0, sd = 0, run = 1;
    std::vector<std::pair<int64_t, int64_t>> pairs;  // (border, interior) positions along the dim
  };
  std::vector<Fold> folds;
  if (m != ops::PadMode::Constant && n_out > 0) {
    for (size_t d = 0; d < r; ++d) {
      Fold f;
      const int64_t n = xs[d], right = ds[d] - n - l[d];
      for (int64_t j = 0; j < l[d]; ++j) f.pairs.push_back({j, l[d] + ops::pad_source(m, n, j - l[d])});
      for (int64_t j = l[d] + n; j < l[d] + n + right; ++j) f.pairs.push_back({j, l[d] + ops::pad_source(m, n, j - l[d])});
      if (f.pairs.empty()) continue;
      f.sd = st[d];
      const size_t last = r - 1;
      for (size_t k = 0; k < r; ++k) {
        if (k == d) continue;
        const int64_t cnt = k < d ? xs[k] : ds[k];
        if (k < d) f.off += l[k] * st[k];
        if (k == last) f.run = cnt;  // the last dim (contiguous) is the inner run unless it is d
        else {
          f.counts.push_back(cnt);
          f.strides.push_back(st[k]);
        }
      }
      folds.push_back(std::move(f));
    }
  }
  const bool direct = folds.empty();  // constant mode, or nothing padded: read dy itself
  auto scratch = std::make_shared<std::vector<C>>(direct ? 0 : size_t(n_dy));
  return [=](const void* const* in, void* const* out) {
    const S* dy = static_cast<const S*>(in[0]);
    S* y = static_cast<S*>(out[0]);
    if (n_out == 0) return;
    C* buf = scratch->data();
    if (!direct) {
      parallel_for(n_dy, kGrain, [&](int64_t b, int64_t e) {
        for (int64_t k = b; k < e; ++k) buf[k] = Num<S>::ld(dy[k]);
      });
      for (const Fold& f : folds) {
        for_each_index(f.counts, f.strides, f.off, f.run * int64_t(f.pairs.size()), [&](int64_t, int64_t base) {
          for (auto [j, t] : f.pairs) {
            const C* src = buf + base + j * f.sd;
            C* dst = buf + base + t * f.sd;
            for (int64_t k = 0; k < f.run; ++k) dst[k] += src[k];
          }
        });
      }
    }
    for_each_index(rows, rstrides, roff, run, [&](int64_t item, int64_t base) {
      S* q = y + item * run;
      if (direct) {
        for (int64_t k = 0; k < run; ++k) q[k] = dy[base + k];
      } else {
        for (int64_t k = 0; k < run; ++k) q[k] = Num<S>::st(buf[base + k]);
      }
    });
  };
}

// ---- space_to_depth_2d / depth_to_space_2d: one strided copy over six dims ----

KernelFn space_depth_kernel(const KernelCtx& c, bool to_depth) {
  const Shape& space = to_depth ? c.in[0].shape : c.out[0].shape;
  const ops::SpaceDepthAttrs& a = typed_attrs<ops::SpaceDepthAttrs>(c.node);
  Ints view(6), ss(6), ds(6);
  ops::space_depth_copy(space.data(), a.nchw, a.use_pixel_shuffle_order, a.block_size, to_depth, view.data(), ss.data(), ds.data());
  return gather_kernel(make_copy_plan(esize(c.in[0]), view, ss, ds, 0, 0));
}

// ---- one_hot ----

template <class I>
void one_hot_scatter(const I* idx, char* out, int64_t inner, int64_t depth, int64_t n, size_t es,
                     const unsigned char* on) {
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      const I v = idx[k];
      if constexpr (std::is_signed_v<I>) {
        if (v < 0) continue;
      }
      if (uint64_t(v) >= uint64_t(depth)) continue;
      const int64_t o = k / inner, t = k - o * inner;
      std::memcpy(out + ((o * depth + int64_t(v)) * inner + t) * int64_t(es), on, es);
    }
  });
}

}  // namespace

void register_shape_kernels() {
  for (const char* op : {"reshape", "reshape_like", "expand_dims", "squeeze", "flatten", "flatten_2d"})
    register_kernel(op, memcpy_kernel);

  register_kernel("transpose", [](const KernelCtx& c) {
    return permute_kernel(c, typed_attrs<ops::TransposeAttrs>(c.node).permutation);
  });
  register_kernel("swap_axes", [](const KernelCtx& c) {
    Ints perm;
    for (size_t i = 0; i < c.in[0].shape.size(); ++i) perm.push_back(int64_t(i));
    const ops::SwapAxesAttrs& a = typed_attrs<ops::SwapAxesAttrs>(c.node);
    std::swap(perm[size_t(a.axis1)], perm[size_t(a.axis2)]);
    return permute_kernel(c, perm);
  });

  register_kernel("broadcast_to", [](const KernelCtx& c) {
    const Shape& xs = c.in[0].shape;
    const Shape& os = c.out[0].shape;
    Ints xst = contiguous_strides(xs), ss(os.size(), 0);
    const size_t lead = os.size() - xs.size();
    for (size_t i = 0; i < xs.size(); ++i) ss[lead + i] = xs[i] == 1 ? 0 : xst[i];
    return gather_kernel(make_copy_plan(esize(c.in[0]), os, ss, contiguous_strides(os), 0, 0));
  });

  register_kernel("slice", [](const KernelCtx& c) {
    const Shape& xs = c.in[0].shape;
    const ops::SliceAttrs& a = typed_attrs<ops::SliceAttrs>(c.node);
    const size_t d = size_t(a.axis);
    int64_t start = a.start;
    if (start < 0) start += xs[d];
    Ints st = contiguous_strides(xs);
    return gather_kernel(make_copy_plan(esize(c.in[0]), c.out[0].shape, st, contiguous_strides(c.out[0].shape),
                                        start * st[d], 0));
  });

  register_kernel("strided_slice", [](const KernelCtx& c) {
    return gather_kernel(slice_plan(esize(c.in[0]), c.in[0].shape, slice_dims(c.node, c.in[0].shape), false));
  });

  register_kernel("slice_gradient", [](const KernelCtx& c) -> KernelFn {
    const Shape& full = c.out[0].shape;
    CopyPlan plan = slice_plan(esize(c.out[0]), full, slice_dims(c.node, full), true);
    const int64_t n = count(c.out[0]);
    const size_t es = esize(c.out[0]);
    return [plan = std::move(plan), n, es](const void* const* in, void* const* out) {
      const unsigned char zero[8] = {0};
      fill(out[0], n, es, zero);
      run_copy(plan, in[0], out[0]);
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
    return gather_kernel(make_copy_plan(esize(c.in[0]), xs, ss, st, off, 0));
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
    return gather_kernel(make_copy_plan(esize(c.in[0]), inter, ss, contiguous_strides(inter), 0, 0));
  });

  register_kernel("tile_gradient", [](const KernelCtx& c) -> KernelFn {
    const Shape& like = c.out[0].shape;
    const Ints& m = typed_attrs<ops::TileAttrs>(c.node).multiples;
    return dispatch_dtype(c.out[0].dtype, [&](auto tag) -> KernelFn {
      using S = decltype(tag);
      if constexpr (std::is_same_v<S, bool>) raise(ErrorKind::Type, "tile_gradient", c.node.name, "no cpu kernel for bool");
      else return tile_gradient_loop<S>(like, m);
    });
  });

  register_kernel("pad", [](const KernelCtx& c) -> KernelFn {
    const Shape& xs = c.in[0].shape;
    const Shape& os = c.out[0].shape;
    const ops::PadAttrs& a = typed_attrs<ops::PadAttrs>(c.node);
    const Ints& l = a.left_padding;
    const ops::PadMode m = a.mode;
    Ints ost = contiguous_strides(os);
    int64_t off = 0;
    for (size_t i = 0; i < xs.size(); ++i) off += l[i] * ost[i];
    const size_t es = esize(c.out[0]);
    CopyPlan plan = make_copy_plan(es, xs, contiguous_strides(xs), ost, 0, off);
    const int64_t n = count(c.out[0]);
    if (m != ops::PadMode::Constant) {
      std::vector<CopyPlan> border = pad_border_plans(es, xs, os, l, m);
      return [plan = std::move(plan), border = std::move(border)](const void* const* in, void* const* out) {
        run_copy(plan, in[0], out[0]);
        for (const CopyPlan& b : border) run_copy(b, out[0], out[0]);  // disjoint regions of the output
      };
    }
    std::array<unsigned char, 8> value{};
    store_from_double(value.data(), c.out[0].dtype, 0, a.constant_value);
    const bool needs_fill = n != count(c.in[0]);
    return [plan = std::move(plan), value, n, es, needs_fill](const void* const* in, void* const* out) {
      if (needs_fill) fill(out[0], n, es, value.data());
      run_copy(plan, in[0], out[0]);
    };
  });

  register_kernel("pad_gradient", [](const KernelCtx& c) -> KernelFn {
    const ops::PadAttrs& a = typed_attrs<ops::PadAttrs>(c.node);
    const ops::PadMode m = a.mode;
    const Ints& l = a.left_padding;
    const Shape& ds = c.in[0].shape;
    const Shape& xs = c.out[0].shape;
    return dispatch_dtype(c.out[0].dtype, [&](auto tag) -> KernelFn {
      using S = decltype(tag);
      if constexpr (std::is_same_v<S, bool>) raise(ErrorKind::Type, "pad_gradient", c.node.name, "no cpu kernel for bool");
      else return pad_gradient_loop<S>(ds, xs, l, m);
    });
  });

  register_kernel("space_to_depth_2d", [](const KernelCtx& c) { return space_depth_kernel(c, true); });
  register_kernel("depth_to_space_2d", [](const KernelCtx& c) { return space_depth_kernel(c, false); });

  // band_part: per matrix row i, columns [lo, hi) are copied and the rest zeroed (bytes).
  register_kernel("band_part", [](const KernelCtx& c) -> KernelFn {
    const Shape& xs = c.in[0].shape;
    const int64_t rows = xs[xs.size() - 2], cols = xs.back();
    const int64_t nrows = rows * cols == 0 ? 0 : count(c.in[0]) / cols;
    const ops::BandPartAttrs& a = typed_attrs<ops::BandPartAttrs>(c.node);
    const int64_t lower = a.num_lower, upper = a.num_upper;
    const size_t es = esize(c.in[0]);
    return [=](const void* const* in, void* const* out) {
      const char* x = static_cast<const char*>(in[0]);
      char* y = static_cast<char*>(out[0]);
      parallel_for(nrows, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, cols)), [&](int64_t b, int64_t e) {
        for (int64_t row = b; row < e; ++row) {
          const int64_t i = row % rows;
          int64_t lo = lower < 0 || lower >= i ? 0 : i - lower;
          int64_t hi = upper < 0 || upper >= cols ? cols : std::min(cols, i + upper + 1);
          lo = std::min(lo, cols);
          hi = std::max(hi, lo);
          const int64_t at = row * cols * int64_t(es);
          if (lo > 0) std::memset(y + at, 0, size_t(lo) * es);
          if (hi > lo) std::memcpy(y + at + lo * int64_t(es), x + at + lo * int64_t(es), size_t(hi - lo) * es);
          if (cols > hi) std::memset(y + at + hi * int64_t(es), 0, size_t(cols - hi) * es);
        }
      });
    };
  });

  register_kernel("one_hot", [](const KernelCtx& c) -> KernelFn {
    const Shape& is = c.in[0].shape;
    const ops::OneHotAttrs& a = typed_attrs<ops::OneHotAttrs>(c.node);
    const int64_t axis = a.axis;
    const int64_t depth = a.depth;
    int64_t inner = 1;
    for (size_t k = size_t(axis); k < is.size(); ++k) inner *= is[k];
    const int64_t n_idx = count(c.in[0]), n_out = count(c.out[0]);
    const size_t es = esize(c.out[0]);
    std::array<unsigned char, 8> on{}, off{};
    store_from_double(on.data(), c.out[0].dtype, 0, a.on_value);
    store_from_double(off.data(), c.out[0].dtype, 0, a.off_value);
    const DType it = c.in[0].dtype;
    return [=](const void* const* in, void* const* out) {
      if (n_out == 0) return;
      fill(out[0], n_out, es, off.data());
      char* y = static_cast<char*>(out[0]);
      dispatch_dtype(it, [&](auto tag) {
        using I = decltype(tag);
        if constexpr (std::is_integral_v<I> && !std::is_same_v<I, bool>)
          one_hot_scatter<I>(static_cast<const I*>(in[0]), y, inner, depth, n_idx, es, on.data());
      });
    };
  });

  register_kernel("concat", [](const KernelCtx& c) -> KernelFn {
    std::vector<Shape> parts;
    for (auto& t : c.in) parts.push_back(t.shape);
    auto copies = axis_copies(esize(c.out[0]), c.out[0].shape, parts, size_t(typed_attrs<ops::AxisAttrs>(c.node).axis), true);
    return [copies = std::move(copies)](const void* const* in, void* const* out) {
      for (size_t k = 0; k < copies.plans.size(); ++k) run_copy(copies.plans[k], in[k], out[0]);
    };
  });

  auto split_kernel = [](const KernelCtx& c) -> KernelFn {
    std::vector<Shape> parts;
    for (auto& t : c.out) parts.push_back(t.shape);
    auto copies = axis_copies(esize(c.in[0]), c.in[0].shape, parts, size_t(typed_attrs<ops::AxisAttrs>(c.node).axis), false);
    return [copies = std::move(copies)](const void* const* in, void* const* out) {
      for (size_t k = 0; k < copies.plans.size(); ++k) run_copy(copies.plans[k], in[0], out[k]);
    };
  };
  register_kernel("split", split_kernel);
  register_kernel("split_like", split_kernel);

  register_kernel("stack", [](const KernelCtx& c) -> KernelFn {
    const size_t ax = size_t(typed_attrs<ops::AxisAttrs>(c.node).axis);
    Shape part = c.out[0].shape;
    part[ax] = 1;
    std::vector<Shape> parts(c.in.size(), part);
    auto copies = axis_copies(esize(c.out[0]), c.out[0].shape, parts, ax, true);
    return [copies = std::move(copies)](const void* const* in, void* const* out) {
      for (size_t k = 0; k < copies.plans.size(); ++k) run_copy(copies.plans[k], in[k], out[0]);
    };
  });

  register_kernel("shape_of", [](const KernelCtx& c) -> KernelFn {
    std::vector<int32_t> dims(c.in[0].shape.begin(), c.in[0].shape.end());
    return [dims](const void* const*, void* const* out) {
      if (!dims.empty()) std::memcpy(out[0], dims.data(), dims.size() * sizeof(int32_t));
    };
  });
}

}  // namespace mg::cpu
