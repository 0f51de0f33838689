// CPU kernels for the gather family (conventions in core/ops/gather.cpp).
//
// Every op is seen as data (O, N, S) and updates (O, Q, S): outer blocks o, the N rows that the
// indices address, Q index rows per block and contiguous slices of S elements. A run first
// checks the indices in parallel and turns them into a table of row numbers (scratch memory);
// an index out of range stops the run with a GraphIndexError naming the op and the index,
// raised on the calling thread, so the executable stays usable. Gathers then copy bytes (no
// dtype dispatch); scatters split the (o, slice-columns) pairs over threads and walk q in
// order within each, so every result element sees its updates in row-major order on one
// thread: results are deterministic and 'set' keeps the last update.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/elementwise_util.h"
#include "core/ops/gather_attrs.h"

namespace mg::cpu {

namespace {

using ops::IndexKind;
using ops::ScatterMode;

struct Plan {
  ops::GatherAttrs a;
  std::string op, node;
  int64_t O = 1, N = 1, Q = 1, S = 1, div = 1;  // see the file comment; row(o, q) = table[(o / div) * Q + q]
  bool per_element = false;                    // along-axis: row(o, q, s) = table[(o * Q + q) * S + s]
  DType idt = DType::Int32;
  int64_t K = 1, T = 0;                         // index tuple size, table entries
  std::vector<int64_t> dims, strides;           // per tuple entry: size it indexes, row stride
  Shape ishape;                                 // for messages
  size_t esize = 1, table = 0;                  // element bytes, scratch slot of the table
};

int64_t prod(const Shape& s, size_t b, size_t e) {
  int64_t p = 1;
  for (size_t i = b; i < e; ++i) p *= s[i];
  return p;
}

// `D` is the shape the indices address (gather: updates; scatter: the result).
std::shared_ptr<Plan> make_plan(const KernelCtx& c, const Shape& D, const TensorType& idx, DType dt) {
  auto p = std::make_shared<Plan>();
  p->a = typed_attrs<ops::GatherAttrs>(c.node);
  p->op = c.node.op->name;
  p->node = c.node.name;
  p->idt = idx.dtype;
  p->ishape = idx.shape;
  p->esize = dtype_size(dt);
  const Shape& I = idx.shape;
  const size_t ax = size_t(p->a.axis), bd = size_t(p->a.batch_dims);
  switch (p->a.kind) {
    case IndexKind::Axis:
      p->div = prod(D, bd, ax);
      p->O = prod(D, 0, bd) * p->div;
      p->N = D[ax];
      p->S = prod(D, ax + 1, D.size());
      p->Q = prod(I, bd, I.size());
      p->dims = {p->N};
      p->strides = {1};
      p->T = prod(I, 0, I.size());
      break;
    case IndexKind::ND: {
      p->K = I.back();
      p->O = prod(D, 0, bd);
      p->Q = prod(I, bd, I.size() - 1);
      p->dims.assign(D.begin() + int64_t(bd), D.begin() + int64_t(bd + size_t(p->K)));
      p->strides.assign(p->dims.size(), 1);
      for (size_t k = p->dims.size(); k-- > 1;) p->strides[k - 1] = p->strides[k] * p->dims[k];
      p->N = prod(D, bd, bd + size_t(p->K));
      p->S = prod(D, bd + size_t(p->K), D.size());
      p->T = prod(I, 0, I.size() - 1);
      break;
    }
    case IndexKind::AlongAxis:
      p->per_element = true;
      p->O = prod(D, 0, ax);
      p->N = D[ax];
      p->Q = I[ax];
      p->S = prod(D, ax + 1, D.size());
      p->dims = {p->N};
      p->strides = {1};
      p->T = prod(I, 0, I.size());
      break;
  }
  p->table = c.scratch(size_t(std::max<int64_t>(p->T, 1)) * sizeof(int64_t));
  return p;
}

// Index value k of the raw indices as int64; false when it does not fit (huge unsigned).
template <class I>
bool load_index(const void* p, int64_t k, int64_t& v) {
  const I x = static_cast<const I*>(p)[k];
  if constexpr (std::is_unsigned_v<I> && sizeof(I) == 8)
    if (x > uint64_t(INT64_MAX)) return false;
  v = int64_t(x);
  return true;
}

std::string raw_index_str(const Plan& p, const void* idx, int64_t k) {
  if (p.idt == DType::UInt64) return std::to_string(static_cast<const uint64_t*>(idx)[k]);
  return std::to_string(int64_t(load_as_double(idx, p.idt, k)));
}

[[noreturn]] void index_error(const Plan& p, const void* idx, int64_t k) {
  std::string pos;
  int64_t rem = k;
  std::vector<int64_t> coord(p.ishape.size());
  for (size_t d = p.ishape.size(); d-- > 0;) {
    coord[d] = p.ishape[d] ? rem % p.ishape[d] : 0;
    rem = p.ishape[d] ? rem / p.ishape[d] : 0;
  }
  for (size_t d = 0; d < coord.size(); ++d) pos += (d ? ", " : "") + std::to_string(coord[d]);
  const size_t e = size_t(k % p.K);
  std::string where;
  if (p.a.kind == IndexKind::ND)
    where = "dim " + std::to_string(p.a.batch_dims + int64_t(e)) + " (tuple entry " + std::to_string(e) + ")";
  else
    where = "axis " + std::to_string(p.a.axis);
  raise(ErrorKind::Index, p.op, p.node,
        "index " + raw_index_str(p, idx, k) + " at indices[" + pos + "] is out of range for " + where +
            " of size " + std::to_string(p.dims[e]) + " (valid: -" + std::to_string(p.dims[e]) + " to " +
            std::to_string(p.dims[e] - 1) + ")");
}

template <class I>
void fill_table_t(const Plan& p, const void* idx, int64_t* table) {
  std::atomic<int64_t> bad{INT64_MAX};
  parallel_for(p.T, 16384, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      int64_t row = 0;
      for (int64_t k = 0; k < p.K; ++k) {
        int64_t v = 0;
        const int64_t n = p.dims[size_t(k)];
        const bool ok = load_index<I>(idx, t * p.K + k, v);
        if (v < 0) v += n;
        if (!ok || v < 0 || v >= n) {
          int64_t cur = bad.load();
          while (t * p.K + k < cur && !bad.compare_exchange_weak(cur, t * p.K + k)) {
          }
          return;  // the smallest bad position of this chunk is recorded
        }
        row += v * p.strides[size_t(k)];
      }
      table[t] = row;
    }
  });
  if (bad.load() != INT64_MAX) index_error(p, idx, bad.load());
}

void fill_table(const Plan& p, const void* idx, int64_t* table) {
  switch (p.idt) {
    case DType::Int8: return fill_table_t<int8_t>(p, idx, table);
    case DType::Int16: return fill_table_t<int16_t>(p, idx, table);
    case DType::Int32: return fill_table_t<int32_t>(p, idx, table);
    case DType::Int64: return fill_table_t<int64_t>(p, idx, table);
    case DType::UInt8: return fill_table_t<uint8_t>(p, idx, table);
    case DType::UInt16: return fill_table_t<uint16_t>(p, idx, table);
    case DType::UInt32: return fill_table_t<uint32_t>(p, idx, table);
    case DType::UInt64: return fill_table_t<uint64_t>(p, idx, table);
    default: raise(ErrorKind::Type, p.op, p.node, std::string("indices must be integers, got ") + dtype_name(p.idt));
  }
}

// ---- gathers: byte copies ----

template <class E>  // an unsigned type of the element's size
void gather_elements(const Plan& p, const E* x, E* y, const int64_t* table) {
  const int64_t total = p.O * p.Q * p.S, qs = p.Q * p.S;
  parallel_for(total, 32768, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = x[((i / qs) * p.N + table[i]) * p.S + i % p.S];
  });
}

KernelFn gather_kernel(std::shared_ptr<const Plan> pp) {
  return [pp](const void* const* in, void* const* out) {
    const Plan& p = *pp;
    int64_t* table = static_cast<int64_t*>(out[p.table]);
    fill_table(p, in[1], table);
    if (p.O * p.Q * p.S == 0) return;
    const char* x = static_cast<const char*>(in[0]);
    char* y = static_cast<char*>(out[0]);
    if (p.per_element) {
      switch (p.esize) {
        case 1: return gather_elements(p, reinterpret_cast<const uint8_t*>(x), reinterpret_cast<uint8_t*>(y), table);
        case 2: return gather_elements(p, reinterpret_cast<const uint16_t*>(x), reinterpret_cast<uint16_t*>(y), table);
        case 4: return gather_elements(p, reinterpret_cast<const uint32_t*>(x), reinterpret_cast<uint32_t*>(y), table);
        default: return gather_elements(p, reinterpret_cast<const uint64_t*>(x), reinterpret_cast<uint64_t*>(y), table);
      }
    }
    const size_t row = size_t(p.S) * p.esize;
    parallel_for(p.O * p.Q, std::max<int64_t>(1, 32768 / std::max<int64_t>(p.S, 1)), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const int64_t o = i / p.Q, q = i % p.Q;
        std::memcpy(y + size_t(i) * row, x + size_t(o * p.N + table[(o / p.div) * p.Q + q]) * row, row);
      }
    });
  };
}

// ---- scatters ----

template <class S, ScatterMode M>
inline void combine(S& t, S u) {
  if constexpr (M == ScatterMode::Set) {
    t = u;
  } else {
    using C = typename Num<S>::C;
    const C x = Num<S>::ld(t), y = Num<S>::ld(u);
    C r;
    if constexpr (std::is_integral_v<C>) {  // wrap, never trap (as the elementwise kernels)
      if constexpr (M == ScatterMode::Add) r = C(uint64_t(x) + uint64_t(y));
      else if constexpr (M == ScatterMode::Sub) r = C(uint64_t(x) - uint64_t(y));
      else if constexpr (M == ScatterMode::Mul) r = C(uint64_t(x) * uint64_t(y));
      else if constexpr (M == ScatterMode::Div) {
        if (y == 0) r = 0;
        else if (std::is_signed_v<C> && y == C(-1)) r = C(uint64_t(0) - uint64_t(x));
        else r = C(x / y);
      } else if constexpr (M == ScatterMode::Min) r = std::min(x, y);
      else r = std::max(x, y);
    } else {
      if constexpr (M == ScatterMode::Add) r = x + y;
      else if constexpr (M == ScatterMode::Sub) r = x - y;
      else if constexpr (M == ScatterMode::Mul) r = x * y;
      else if constexpr (M == ScatterMode::Div) r = x / y;
      else if (std::isnan(x) || std::isnan(y)) r = std::isnan(x) ? x : y;  // NaN propagates (np.maximum.at)
      else if constexpr (M == ScatterMode::Min) r = std::min(x, y);
      else r = std::max(x, y);
    }
    t = Num<S>::st(r);
  }
}

template <class S, ScatterMode M>
KernelFn scatter_kernel(std::shared_ptr<const Plan> pp) {
  return [pp](const void* const* in, void* const* out) {
    const Plan& p = *pp;
    const int base = p.a.with_data ? 1 : 0;
    int64_t* table = static_cast<int64_t*>(out[p.table]);
    fill_table(p, in[base + 1], table);
    S* r = static_cast<S*>(out[0]);
    const size_t nbytes = size_t(p.O * p.N * p.S) * sizeof(S);
    if (nbytes) {
      if (p.a.with_data) std::memcpy(r, in[0], nbytes);
      else std::memset(r, 0, nbytes);  // zero bits are 0 in every dtype
    }
    const S* u = static_cast<const S*>(in[base]);
    if (p.O * p.Q * p.S == 0) return;
    // columns of the slices split when there are few outer blocks; q stays in order
    const int64_t C = p.O >= 2 * num_threads() ? 1 : std::min<int64_t>(p.S, 4 * num_threads());
    const int64_t cs = (p.S + C - 1) / C;
    parallel_for(p.O * C, std::max<int64_t>(1, 32768 / std::max<int64_t>(p.Q * cs, 1)), [&](int64_t b, int64_t e) {
      for (int64_t it = b; it < e; ++it) {
        const int64_t o = it / C, s0 = (it % C) * cs, s1 = std::min(p.S, s0 + cs);
        for (int64_t q = 0; q < p.Q; ++q) {
          const S* ur = u + (o * p.Q + q) * p.S;
          if (p.per_element) {
            const int64_t* tr = table + (o * p.Q + q) * p.S;
            for (int64_t s = s0; s < s1; ++s) combine<S, M>(r[(o * p.N + tr[s]) * p.S + s], ur[s]);
          } else {
            S* rr = r + (o * p.N + table[(o / p.div) * p.Q + q]) * p.S;
            for (int64_t s = s0; s < s1; ++s) combine<S, M>(rr[s], ur[s]);
          }
        }
      }
    });
  };
}

template <class S>
KernelFn scatter_for_mode(std::shared_ptr<const Plan> p) {
  if constexpr (std::is_same_v<S, bool>) {
    return scatter_kernel<S, ScatterMode::Set>(p);  // inference allows bool only with 'set'
  } else {
    switch (p->a.mode) {
      case ScatterMode::Add: return scatter_kernel<S, ScatterMode::Add>(p);
      case ScatterMode::Sub: return scatter_kernel<S, ScatterMode::Sub>(p);
      case ScatterMode::Mul: return scatter_kernel<S, ScatterMode::Mul>(p);
      case ScatterMode::Div: return scatter_kernel<S, ScatterMode::Div>(p);
      case ScatterMode::Min: return scatter_kernel<S, ScatterMode::Min>(p);
      case ScatterMode::Max: return scatter_kernel<S, ScatterMode::Max>(p);
      default: return scatter_kernel<S, ScatterMode::Set>(p);
    }
  }
}

}  // namespace

void register_gather_kernels() {
  for (const char* op : {"gather", "gather_nd", "gather_along_axis"})
    register_kernel(op, [](const KernelCtx& c) -> KernelFn {
      return gather_kernel(make_plan(c, c.in[0].shape, c.in[1], c.in[0].dtype));
    });
  for (const char* op : {"scatter", "scatter_with_data", "scatter_nd", "scatter_nd_with_data", "scatter_along_axis",
                         "scatter_along_axis_with_data"})
    register_kernel(op, [](const KernelCtx& c) -> KernelFn {
      std::shared_ptr<const Plan> p = make_plan(c, c.out[0].shape, c.in.back(), c.out[0].dtype);
      return dispatch_dtype(c.out[0].dtype, [&](auto tag) { return scatter_for_mode<decltype(tag)>(p); });
    });
}

}  // namespace mg::cpu
