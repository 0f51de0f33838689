// CUDA kernels for the gather family (conventions in core/ops/gather.cpp, plan as the CPU's
// kernels_gather.cpp): every op is seen as data (O, N, S) and updates (O, Q, S).
//
// A step first turns the indices into a table of row numbers (scratch), checking them: an
// index out of range records its flat position (the smallest one, as on the CPU) in a device
// word that is copied to pinned host memory within the run, and the run raises the CPU's
// GraphIndexError once it has completed; rows of bad indices are skipped meanwhile (never read
// or written out of bounds). Gathers copy elements by size. Scatters start from data (or
// zeros) and combine every update with an atomic compare-and-swap of the containing word
// (atomicAdd for float32 'add'): all modes but 'set' are order-independent up to float
// rounding. 'set' keeps the last update in row-major order, as the CPU does, by electing the
// highest update row per result element (atomicMax) before copying: deterministic.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cuda_internal.h"
#include "core/error.h"
#include "core/ops/gather_attrs.h"
#include "core/registry.h"
#include "core/typed_attrs.h"

namespace mg::cuda {

namespace {

using ops::IndexKind;
using ops::ScatterMode;

struct TableParams {
  int64_t T = 0;
  int32_t K = 1;
  int64_t dims[kMaxRank] = {}, strides[kMaxRank] = {};
};

struct Geometry {
  int64_t O = 1, N = 1, Q = 1, S = 1, div = 1;  // row(o, q) = table[(o / div) * Q + q]
  int32_t per_element = 0;                      // along-axis: row(o, q, s) = table[(o * Q + q) * S + s]
};

const char* kGeometry = R"(
struct TP { i64 T; int K; i64 dims[8], strides[8]; };
struct G { i64 O, N, Q, S, div; int per_element; };
// the table row addressed by update element i = (o, q, s), and o, s
__device__ __forceinline__ i64 mg_row(const G& g, const i64* table, i64 i, i64& o, i64& s) {
  s = i % g.S;
  const i64 oq = i / g.S, q = oq % g.Q;
  o = oq / g.Q;
  return g.per_element ? table[i] : table[(o / g.div) * g.Q + q];
}
)";

const char* kTable = R"(
extern "C" __global__ void table(TP p, const I* __restrict__ idx, i64* __restrict__ table, u64* rec) {
  for (i64 t = blockIdx.x * (i64)blockDim.x + threadIdx.x; t < p.T; t += (i64)gridDim.x * blockDim.x) {
    i64 row = 0;
    for (int k = 0; k < p.K; ++k) {
      const I x = idx[t * p.K + k];
      const i64 n = p.dims[k];
      i64 v = (i64)x;
      const bool fits = !IS_U64 || (u64)x <= 0x7fffffffffffffffull;
      if (v < 0) v += n;
      if (!fits || v < 0 || v >= n) { atomicMin(rec, (u64)(t * p.K + k)); row = -1; break; }
      row += v * p.strides[k];
    }
    table[t] = row;
  }
}
extern "C" __global__ void record(const I* __restrict__ idx, u64* rec) {
  if (rec[0] != ~0ull) rec[1] = IS_U64 ? (u64)idx[rec[0]] : (u64)(i64)idx[rec[0]];
}
)";

// The state a prepared step shares with its launches and its after-run check.
struct Shared {
  ops::GatherAttrs a;
  std::string op, node;
  DType idt = DType::Int32;
  Shape ishape;
  TableParams tp;
  Geometry g;
  Kernel table, record, main, elect;
  std::shared_ptr<Buffer> rec;              // device: {smallest bad position or ~0, raw index}
  std::shared_ptr<uint64_t> rec_host;       // pinned copy, read after the run
  size_t table_slot = 0, win_slot = 0;
  size_t esize = 1;
  int64_t result_elems = 0;
};

int64_t prod(const Shape& s, size_t b, size_t e) {
  int64_t p = 1;
  for (size_t i = b; i < e; ++i) p *= s[i];
  return p;
}

std::string table_source(DType idt) {
  return prelude() + "typedef " + storage_type(idt) + " I;\n#define IS_U64 " + (idt == DType::UInt64 ? "1" : "0") + "\n" +
         kGeometry + kTable;
}

// `D` is the shape the indices address (gather: the data; scatter: the result).
std::shared_ptr<Shared> make_shared_state(const KernelCtx& c, const Shape& D, const TensorType& idx, size_t esize) {
  auto p = std::make_shared<Shared>(Shared{typed_attrs<ops::GatherAttrs>(c.node), c.node.op->name, c.node.name, idx.dtype, idx.shape});
  p->esize = esize;
  const Shape& I = idx.shape;
  const size_t ax = size_t(p->a.axis), bd = size_t(p->a.batch_dims);
  Geometry& g = p->g;
  TableParams& tp = p->tp;
  std::vector<int64_t> dims{0}, strides{1};
  switch (p->a.kind) {
    case IndexKind::Axis:
      g.div = prod(D, bd, ax);
      g.O = prod(D, 0, bd) * g.div;
      g.N = D[ax];
      g.S = prod(D, ax + 1, D.size());
      g.Q = prod(I, bd, I.size());
      dims[0] = g.N;
      tp.T = prod(I, 0, I.size());
      break;
    case IndexKind::ND: {
      tp.K = int32_t(I.back());
      g.O = prod(D, 0, bd);
      g.Q = prod(I, bd, I.size() - 1);
      dims.assign(D.begin() + int64_t(bd), D.begin() + int64_t(bd + size_t(tp.K)));
      strides.assign(dims.size(), 1);
      for (size_t k = dims.size(); k-- > 1;) strides[k - 1] = strides[k] * dims[k];
      g.N = prod(D, bd, bd + size_t(tp.K));
      g.S = prod(D, bd + size_t(tp.K), D.size());
      tp.T = prod(I, 0, I.size() - 1);
      break;
    }
    case IndexKind::AlongAxis:
      g.per_element = 1;
      g.O = prod(D, 0, ax);
      g.N = D[ax];
      g.Q = I[ax];
      g.S = prod(D, ax + 1, D.size());
      dims[0] = g.N;
      tp.T = prod(I, 0, I.size());
      break;
  }
  if (dims.size() > size_t(kMaxRank))
    raise(ErrorKind::NotImplemented, p->op, p->node, "index tuples of more than 8 entries on cuda");
  for (size_t k = 0; k < dims.size(); ++k) {
    tp.dims[k] = dims[k];
    tp.strides[k] = strides[k];
  }
  if (!is_integer(p->idt)) raise(ErrorKind::Type, p->op, p->node, std::string("indices must be integers, got ") + dtype_name(p->idt));
  const std::string src = table_source(p->idt);
  p->table = nvrtc_kernel(src, "table");
  p->record = nvrtc_kernel(src, "record");
  p->table_slot = c.scratch(size_t(std::max<int64_t>(tp.T, 1)) * sizeof(int64_t));
  p->rec = device_alloc(2 * sizeof(uint64_t));
  void* h = nullptr;
  check(cudaMallocHost(&h, 2 * sizeof(uint64_t)), "allocating pinned memory for index checks");
  p->rec_host = std::shared_ptr<uint64_t>(static_cast<uint64_t*>(h), [](uint64_t* q) { free_pinned(q); });
  p->rec_host.get()[0] = ~0ull;
  // after the run: the smallest bad index position, if any, as the CPU reports it
  c.after_run([p] {
    if (p->rec_host.get()[0] == ~0ull) return;
    const Shared& s = *p;
    const int64_t k = int64_t(s.rec_host.get()[0]);
    const uint64_t raw = s.rec_host.get()[1];
    // the CPU prints the index through a double (exact below 2^53)
    const std::string val = s.idt == DType::UInt64 ? std::to_string(raw) : std::to_string(int64_t(double(int64_t(raw))));
    std::vector<int64_t> coord(s.ishape.size());
    int64_t rem = k;
    for (size_t d = s.ishape.size(); d-- > 0;) {
      coord[d] = s.ishape[d] ? rem % s.ishape[d] : 0;
      rem = s.ishape[d] ? rem / s.ishape[d] : 0;
    }
    std::string pos;
    for (size_t d = 0; d < coord.size(); ++d) pos += (d ? ", " : "") + std::to_string(coord[d]);
    const int64_t e = k % s.tp.K, n = s.tp.dims[e];
    const std::string where = s.a.kind == IndexKind::ND ? "dim " + std::to_string(s.a.batch_dims + e) +
                                                             " (tuple entry " + std::to_string(e) + ")"
                                                       : "axis " + std::to_string(s.a.axis);
    raise(ErrorKind::Index, s.op, s.node,
          "index " + val + " at indices[" + pos + "] is out of range for " + where + " of size " + std::to_string(n) +
              " (valid: -" + std::to_string(n) + " to " + std::to_string(n - 1) + ")");
  });
  return p;
}

int64_t grid(int64_t n) { return std::min<int64_t>((n + 255) / 256, int64_t(1) << 20); }

// Resets the record, builds the table and copies the record to the host (ordered on `s`).
void launch_table(Shared& p, cudaStream_t s, const void* idx, void* table) {
  uint64_t* rec = static_cast<uint64_t*>(p.rec->data);
  fill_bytes(rec, 1, 8, ~0ull, s);
  if (p.tp.T > 0) {
    TableParams tp = p.tp;
    void* args[] = {&tp, &idx, &table, &rec};
    launch(p.table, grid(tp.T), 256, 0, s, args);
    void* rargs[] = {&idx, &rec};
    launch(p.record, 1, 1, 0, s, rargs);
  }
  check(cudaMemcpyAsync(p.rec_host.get(), rec, 2 * sizeof(uint64_t), cudaMemcpyDeviceToHost, s), "reading index checks");
}

const char* kGatherMain = R"(
extern "C" __global__ void gather(G g, const E* __restrict__ x, E* __restrict__ y, const i64* __restrict__ table) {
  const i64 n = g.O * g.Q * g.S;
  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
    i64 o, s;
    const i64 row = mg_row(g, table, i, o, s);
    y[i] = row < 0 ? E(0) : x[(o * g.N + row) * g.S + s];
  }
}
)";

std::string elem_type(size_t esize) { return esize == 1 ? "u8" : esize == 2 ? "u16" : esize == 4 ? "u32" : "u64"; }

std::string gather_source(size_t es) { return prelude() + "typedef " + elem_type(es) + " E;\n" + kGeometry + kGatherMain; }

LaunchFn gather_factory(const KernelCtx& c) {
  const size_t es = dtype_size(c.in[0].dtype);
  auto p = make_shared_state(c, c.in[0].shape, c.in[1], es);
  p->main = nvrtc_kernel(gather_source(es), "gather");
  return [p](cudaStream_t s, const void* const* in, void* const* out) {
    void* table = out[p->table_slot];
    launch_table(*p, s, in[1], table);
    const int64_t n = p->g.O * p->g.Q * p->g.S;
    if (n == 0) return;
    Geometry g = p->g;
    const void* x = in[0];
    void* y = out[0];
    void* args[] = {&g, &x, &y, &table};
    launch(p->main, grid(n), 256, 0, s, args);
  };
}

// The combine expression of a mode on compute values x (current) and y (update), as the CPU's.
std::string combine_expr(ScatterMode m, DType t) {
  const bool fl = is_floating(t), sgn = is_signed_integer(t);
  if (fl) {
    switch (m) {
      case ScatterMode::Add: return "x + y";
      case ScatterMode::Sub: return "x - y";
      case ScatterMode::Mul: return "x * y";
      case ScatterMode::Div: return "x / y";
      case ScatterMode::Min: return "(x != x || y != y) ? (x != x ? x : y) : (y < x ? y : x)";
      case ScatterMode::Max: return "(x != x || y != y) ? (x != x ? x : y) : (x < y ? y : x)";
      default: return "y";
    }
  }
  switch (m) {  // integers wrap and never trap, as the elementwise kernels
    case ScatterMode::Add: return "C((u64)x + (u64)y)";
    case ScatterMode::Sub: return "C((u64)x - (u64)y)";
    case ScatterMode::Mul: return "C((u64)x * (u64)y)";
    case ScatterMode::Div:
      return std::string("y == 0 ? C(0) : ") + (sgn ? "y == C(-1) ? C(0ull - (u64)x) : " : "") + "C(x / y)";
    case ScatterMode::Min: return "(y < x ? y : x)";
    case ScatterMode::Max: return "(x < y ? y : x)";
    default: return "y";
  }
}

// An atomic read-modify-write of one element of storage type S through the word holding it.
std::string atomic_code(DType t, ScatterMode m) {
  const size_t es = dtype_size(t);
  std::string c = "__device__ __forceinline__ C comb(C x, C y) { return " + combine_expr(m, t) + "; }\n";
  c += "template <class A, class B> __device__ __forceinline__ A mg_bits(B b) { union { B b; A a; } u; u.b = b; return u.a; }\n";
  c += "__device__ __forceinline__ void amo(S* p, C y) {\n";
  if (t == DType::Float32 && m == ScatterMode::Add) return c + "  atomicAdd(p, y);\n}\n";
  const std::string US = elem_type(es);
  const std::string W = es == 8 ? "unsigned long long" : "unsigned int";
  if (es >= 4) {
    c += "  " + W + "* w = (" + W + "*)p; " + W + " old = *w, assumed;\n";
    c += "  do { assumed = old; const S cur = mg_bits<S>(assumed); const S nv = " +
         store_expr(t, "comb(" + load_expr(t, "cur") + ", y)") + "; old = atomicCAS(w, assumed, mg_bits<" + W +
         ">(nv)); } while (old != assumed);\n}\n";
    return c;
  }
  c += "  unsigned int* w = (unsigned int*)((u64)p & ~3ull); const unsigned sh = (unsigned)((u64)p & 3ull) * 8u;\n";
  c += "  const unsigned mask = (" + std::string(es == 1 ? "0xffu" : "0xffffu") + ") << sh;\n";
  c += "  unsigned int old = *w, assumed;\n";
  c += "  do { assumed = old; const S cur = mg_bits<S>((" + US + ")((assumed & mask) >> sh));\n";
  c += "    const S nv = " + store_expr(t, "comb(" + load_expr(t, "cur") + ", y)") + "; const " + US + " nb = mg_bits<" + US +
       ">(nv);\n";
  c += "    old = atomicCAS(w, assumed, (assumed & ~mask) | (((unsigned)nb << sh) & mask)); } while (old != assumed);\n}\n";
  return c;
}

const char* kScatterMain = R"(
extern "C" __global__ void combine(G g, const S* __restrict__ u, S* r, const i64* __restrict__ table) {
  const i64 n = g.O * g.Q * g.S;
  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
    i64 o, s;
    const i64 row = mg_row(g, table, i, o, s);
    if (row >= 0) amo(r + (o * g.N + row) * g.S + s, LOADU);
  }
}
// 'set': the highest update row q (+1) per result element wins, then it is copied
extern "C" __global__ void elect(G g, const i64* __restrict__ table, unsigned int* win) {
  const i64 n = g.O * g.Q * g.S;
  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
    i64 o, s;
    const i64 row = mg_row(g, table, i, o, s);
    if (row >= 0) atomicMax(win + (o * g.N + row) * g.S + s, (unsigned int)((i / g.S) % g.Q) + 1u);
  }
}
extern "C" __global__ void put(G g, const S* __restrict__ u, S* r, const i64* __restrict__ table, const unsigned int* win) {
  const i64 n = g.O * g.Q * g.S;
  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
    i64 o, s;
    const i64 row = mg_row(g, table, i, o, s);
    if (row < 0) continue;
    const i64 t = (o * g.N + row) * g.S + s;
    if (win[t] == (unsigned int)((i / g.S) % g.Q) + 1u) r[t] = u[i];
  }
}
)";

std::string scatter_source(DType dt, ScatterMode m) {
  std::string src = prelude() + "typedef " + storage_type(dt) + " S;\ntypedef " + compute_type(dt) + " C;\n" + kGeometry;
  if (m == ScatterMode::Set) src += "__device__ __forceinline__ void amo(S*, C) {}\n#define LOADU C(0)\n";
  else src += atomic_code(dt, m) + "#define LOADU " + load_expr(dt, "u[i]") + "\n";
  return src + kScatterMain;
}

LaunchFn scatter_factory(const KernelCtx& c) {
  const DType dt = c.out[0].dtype;
  auto p = make_shared_state(c, c.out[0].shape, c.in.back(), dtype_size(dt));
  const ScatterMode m = p->a.mode;
  const bool set = m == ScatterMode::Set || dt == DType::Bool;
  p->result_elems = num_elements(c.out[0].shape);
  if (set) {
    if (p->g.Q >= int64_t(UINT32_MAX))
      raise(ErrorKind::NotImplemented, p->op, p->node, "'set' with 2^32 or more update rows per slice on cuda");
    p->win_slot = c.scratch(size_t(std::max<int64_t>(p->result_elems, 1)) * sizeof(uint32_t));
  }
  const std::string src = scatter_source(dt, set ? ScatterMode::Set : m);
  p->main = nvrtc_kernel(src, set ? "put" : "combine");
  if (set) p->elect = nvrtc_kernel(src, "elect");
  const bool with_data = p->a.with_data;
  return [p, with_data, set](cudaStream_t s, const void* const* in, void* const* out) {
    const int base = with_data ? 1 : 0;
    void* table = out[p->table_slot];
    launch_table(*p, s, in[base + 1], table);
    void* r = out[0];
    const size_t nbytes = size_t(p->result_elems) * p->esize;
    if (nbytes) {
      if (with_data) check(cudaMemcpyAsync(r, in[0], nbytes, cudaMemcpyDeviceToDevice, s), "copying scatter data");
      else check(cudaMemsetAsync(r, 0, nbytes, s), "zeroing a scatter result");  // zero bits are 0 in every dtype
    }
    const int64_t n = p->g.O * p->g.Q * p->g.S;
    if (n == 0) return;
    Geometry g = p->g;
    const void* u = in[base];
    if (set) {
      void* win = out[p->win_slot];
      check(cudaMemsetAsync(win, 0, size_t(p->result_elems) * sizeof(uint32_t), s), "clearing scatter winners");
      void* eargs[] = {&g, &table, &win};
      launch(p->elect, grid(n), 256, 0, s, eargs);
      void* args[] = {&g, &u, &r, &table, &win};
      launch(p->main, grid(n), 256, 0, s, args);
    } else {
      void* args[] = {&g, &u, &r, &table};
      launch(p->main, grid(n), 256, 0, s, args);
    }
  };
}

}  // namespace

void register_gather_kernels() {
  for (const char* op : {"gather", "gather_nd", "gather_along_axis"}) register_kernel(op, gather_factory);
  for (const char* op : {"scatter", "scatter_with_data", "scatter_nd", "scatter_nd_with_data", "scatter_along_axis",
                         "scatter_along_axis_with_data"})
    register_kernel(op, scatter_factory);
}

}  // namespace mg::cuda
