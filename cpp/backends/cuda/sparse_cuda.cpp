// CUDA kernels of the sparse family (core/ops/sparse.cpp), with the CPU kernels' semantics
// (backends/cpu/kernels_sparse.cpp): sparse_tensor, sparse_gather, sparse_matmul and
// sparse_sampled_matmul over coo, csr and csc storage, int32 or int64 indices.
//
// Every step first turns the structure into the (row, column) of each stored entry (scratch;
// -1 for an entry whose indices are bad) and checks the index parts: the smallest bad position
// of each kind is recorded in a device word copied to pinned host memory within the run, and the
// run raises the CPU's GraphIndexError, naming the first problem the CPU's serial check would
// find, once it has completed. Bad entries are skipped meanwhile (never read or written out of
// bounds). sparse_gather and sparse_sampled_matmul then run one thread per entry.
//
// sparse_tensor and sparse_matmul sum over entries; the CPU adds the entries of one result
// element in storage order, so here each row's entries are listed in storage order (a counting
// sort by row, then a sort of each row's list) and one thread adds them up: per row for the
// dense matrix, per result element for the product. No atomics touch the sums, so results are
// deterministic and, with no multiply-add contraction, bit for bit the CPU's. Halves accumulate
// in float and integers wrap, as on the CPU. A csr product needs no row view: its rows' entries
// are stored in order already, and it reads them there (in float32, four outputs a thread where
// the dense columns come in fours).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "backends/cuda/cuda_internal.h"
#include "core/error.h"
#include "core/ops/sparse_attrs.h"
#include "core/registry.h"
#include "core/shape.h"
#include "core/typed_attrs.h"

namespace mg::cuda {

namespace {

using ops::SparseAttrs;
using ops::SparseStorage;

// The structure as the kernels see it; storage: 0 coo, 1 csr, 2 csc.
struct SG {
  int64_t rows = 0, cols = 0, nnz = 0, groups = 0;
  int32_t storage = 0;
};

const char* kStructureSrc = R"(
struct SG { i64 rows, cols, nnz, groups; int storage; };
#define MG_LOOP(i, n) for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < (n); i += (i64)gridDim.x * blockDim.x)
// rec[0]: smallest bad indices0 position; rec[1]: smallest bad indices1 position (coo) or the
// smallest k whose start is less than start k - 1 (csr, csc)
extern "C" __global__ void check_idx(SG g, const I* __restrict__ i0, const I* __restrict__ i1, u64* rec) {
  const i64 lim0 = g.storage == 2 ? g.rows : g.cols;
  const i64 m = g.storage == 0 ? g.nnz : (g.nnz > g.groups ? g.nnz : g.groups);
  MG_LOOP(t, m) {
    if (t < g.nnz) {
      const i64 a = (i64)i0[t];
      if (a < 0 || a >= lim0) atomicMin(rec, (u64)t);
      if (g.storage == 0) {
        const i64 b = (i64)i1[t];
        if (b < 0 || b >= g.rows) atomicMin(rec + 1, (u64)t);
      }
    }
    if (g.storage != 0 && t < g.groups && i1[t + 1] < i1[t]) atomicMin(rec + 1, (u64)(t + 1));
  }
}
// the raw values the error message quotes
extern "C" __global__ void record(SG g, const I* __restrict__ i0, const I* __restrict__ i1, u64* rec) {
  i64* o = (i64*)rec;
  if (rec[0] != ~0ull) o[2] = (i64)i0[rec[0]];
  if (rec[1] != ~0ull) {
    o[3] = (i64)i1[rec[1]];
    if (g.storage != 0) o[4] = (i64)i1[rec[1] - 1];
  }
  if (g.storage != 0) { o[5] = (i64)i1[0]; o[6] = (i64)i1[g.groups]; }
}
// the (row, column) of each entry, -1 for both where an index is bad
extern "C" __global__ void coords(SG g, const I* __restrict__ i0, const I* __restrict__ i1, i64* er, i64* ec) {
  MG_LOOP(e, g.nnz) {
    const i64 a = (i64)i0[e];
    i64 r, c;
    if (g.storage == 0) {
      r = (i64)i1[e];
      c = a;
    } else {  // the group holding e: one before the first start greater than e
      i64 lo = 0, hi = g.groups + 1;
      while (lo < hi) {
        const i64 mid = lo + (hi - lo) / 2;
        if ((i64)i1[mid] <= e) lo = mid + 1; else hi = mid;
      }
      const i64 grp = lo - 1;
      r = g.storage == 1 ? grp : a;
      c = g.storage == 1 ? a : grp;
    }
    const bool ok = r >= 0 && r < g.rows && c >= 0 && c < g.cols;
    er[e] = ok ? r : -1;
    ec[e] = ok ? c : -1;
  }
}
// Each row's entries in storage order: count per row, starts, placement, then a sort per row.
extern "C" __global__ void count_rows(SG g, const i64* __restrict__ er, u64* cnt) {
  MG_LOOP(e, g.nnz) if (er[e] >= 0) atomicAdd(cnt + er[e], 1ull);
}
// rs[0] = 0, rs[r + 1] = rs[r] + cnt[r]: one block, each thread a run of rows
extern "C" __global__ void row_starts(i64 rows, const u64* __restrict__ cnt, i64* rs) {
  __shared__ i64 part[1024];
  const i64 t = threadIdx.x, nt = blockDim.x, per = (rows + nt - 1) / nt;
  const i64 b = t * per < rows ? t * per : rows, e = b + per < rows ? b + per : rows;
  i64 s = 0;
  for (i64 r = b; r < e; ++r) s += (i64)cnt[r];
  part[t] = s;
  __syncthreads();
  for (i64 off = 1; off < nt; off <<= 1) {
    const i64 add = t >= off ? part[t - off] : 0;
    __syncthreads();
    part[t] += add;
    __syncthreads();
  }
  i64 run = part[t] - s;
  if (t == 0) rs[0] = 0;
  for (i64 r = b; r < e; ++r) { run += (i64)cnt[r]; rs[r + 1] = run; }
}
extern "C" __global__ void place(SG g, const i64* __restrict__ er, const i64* __restrict__ rs, u64* cur, i64* perm) {
  MG_LOOP(e, g.nnz) {
    const i64 r = er[e];
    if (r >= 0) perm[rs[r] + (i64)atomicAdd(cur + r, 1ull)] = e;
  }
}
__device__ void mg_sift(i64* a, i64 root, i64 n) {
  for (;;) {
    i64 c = 2 * root + 1;
    if (c >= n) return;
    if (c + 1 < n && a[c + 1] > a[c]) ++c;
    if (a[root] >= a[c]) return;
    const i64 t = a[root]; a[root] = a[c]; a[c] = t;
    root = c;
  }
}
extern "C" __global__ void order_rows(SG g, const i64* __restrict__ rs, i64* perm) {
  MG_LOOP(r, g.rows) {  // heap sort of the row's entry numbers
    i64* a = perm + rs[r];
    const i64 n = rs[r + 1] - rs[r];
    for (i64 k = n / 2; k-- > 0;) mg_sift(a, k, n);
    for (i64 k = n - 1; k > 0; --k) {
      const i64 t = a[0]; a[0] = a[k]; a[k] = t;
      mg_sift(a, 0, k);
    }
  }
}
)";

// S storage, A accumulation (float for halves, the unsigned type of the width for integers),
// LDA / STA convert, ADD / MUL round as the CPU does (no contraction).
const char* kComputeSrc = R"(
extern "C" __global__ void to_dense(SG g, const S* __restrict__ v, const i64* __restrict__ rs,
                                    const i64* __restrict__ perm, const i64* __restrict__ ec, A* acc) {
  MG_LOOP(r, g.rows) {
    A* row = acc + r * g.cols;
    for (i64 k = rs[r]; k < rs[r + 1]; ++k) {
      const i64 e = perm[k];
      row[ec[e]] = ADD(row[ec[e]], LDA(v[e]));
    }
  }
}
extern "C" __global__ void store(i64 n, const A* __restrict__ acc, S* o) {
  MG_LOOP(i, n) o[i] = STA(acc[i]);
}
extern "C" __global__ void spmm(SG g, i64 n, const S* __restrict__ v, const S* __restrict__ d, const i64* __restrict__ rs,
                                const i64* __restrict__ perm, const i64* __restrict__ ec, S* o) {
  MG_LOOP(i, g.rows * n) {
    const i64 r = i / n, j = i % n;
    A s = 0;
    for (i64 k = rs[r]; k < rs[r + 1]; ++k) {
      const i64 e = perm[k];
      s = ADD(s, MUL(LDA(v[e]), LDA(d[ec[e] * n + j])));
    }
    o[i] = STA(s);
  }
}
// csr: row r's entries are [starts[r], starts[r + 1]) in storage order already, so the product
// reads them there (no row view). Starts that are out of order or range make the run raise
// after it completes; meanwhile the bounds are clamped and bad entries (ec -1) skipped.
extern "C" __global__ void spmm_csr(SG g, i64 n, const S* __restrict__ v, const S* __restrict__ d,
                                    const I* __restrict__ starts, const i64* __restrict__ ec, S* o) {
  MG_LOOP(i, g.rows * n) {
    const i64 r = i / n, j = i % n;
    const i64 b = (i64)starts[r] < 0 ? 0 : (i64)starts[r];
    const i64 e = (i64)starts[r + 1] > g.nnz ? g.nnz : (i64)starts[r + 1];
    A s = 0;
    for (i64 k = b; k < e; ++k) {
      const i64 c = ec[k];
      if (c >= 0) s = ADD(s, MUL(LDA(v[k]), LDA(d[c * n + j])));
    }
    o[i] = STA(s);
  }
}
#ifdef MG_F32
// spmm_csr for float32 with n a multiple of 4 and d, o 16-byte aligned: four adjacent outputs a
// thread from one 16-byte load per entry, each output summed in the same order as spmm_csr's.
extern "C" __global__ void spmm_csr4(SG g, i64 n, const S* __restrict__ v, const S* __restrict__ d,
                                     const I* __restrict__ starts, const i64* __restrict__ ec, S* o) {
  const i64 n4 = n / 4;
  MG_LOOP(i, g.rows * n4) {
    const i64 r = i / n4, j = i % n4 * 4;
    const i64 b = (i64)starts[r] < 0 ? 0 : (i64)starts[r];
    const i64 e = (i64)starts[r + 1] > g.nnz ? g.nnz : (i64)starts[r + 1];
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (i64 k = b; k < e; ++k) {
      const i64 c = ec[k];
      if (c < 0) continue;
      const float a = v[k];
      const float4 x = *(const float4*)(d + c * n + j);
      s0 = ADD(s0, MUL(a, x.x));
      s1 = ADD(s1, MUL(a, x.y));
      s2 = ADD(s2, MUL(a, x.z));
      s3 = ADD(s3, MUL(a, x.w));
    }
    *(float4*)(o + r * n + j) = make_float4(s0, s1, s2, s3);
  }
}
#endif
extern "C" __global__ void gather(SG g, const S* __restrict__ d, const i64* __restrict__ er,
                                  const i64* __restrict__ ec, S* o) {
  MG_LOOP(e, g.nnz) o[e] = er[e] < 0 ? (S)0 : d[er[e] * g.cols + ec[e]];
}
extern "C" __global__ void sddmm(SG g, i64 n, const S* __restrict__ x, const S* __restrict__ y,
                                 const i64* __restrict__ er, const i64* __restrict__ ec, S* o) {
  MG_LOOP(e, g.nnz) {
    A s = 0;
    if (er[e] >= 0) {
      const S* xr = x + er[e] * n;
      const S* yr = y + ec[e] * n;
      for (i64 j = 0; j < n; ++j) s = ADD(s, MUL(LDA(xr[j]), LDA(yr[j])));
    }
    o[e] = STA(s);
  }
}
)";

std::string unsigned_of(DType t) {
  switch (dtype_size(t)) {
    case 1: return "u8";
    case 2: return "u16";
    case 4: return "u32";
    default: return "u64";
  }
}

bool is_half(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

std::string source(DType vt, DType it) {
  std::string s = prelude() + "typedef " + storage_type(it) + " I;\ntypedef " + storage_type(vt) + " S;\n";
  if (vt == DType::Float32) s += "#define MG_F32 1\n";
  if (is_floating(vt)) {
    s += "typedef float A;\n#define LDA(x) " + load_expr(vt, "(x)") + "\n#define STA(x) " + store_expr(vt, "(x)") +
         "\n#define ADD(a, b) __fadd_rn(a, b)\n#define MUL(a, b) __fmul_rn(a, b)\n";
  } else {  // integers wrap (and are never multiplied: the products are float-only)
    s += "typedef " + unsigned_of(vt) + " A;\n#define LDA(x) ((A)(x))\n#define STA(x) ((S)(x))\n"
         "#define ADD(a, b) ((A)((a) + (b)))\n#define MUL(a, b) ((A)((a) * (b)))\n";
  }
  return s + kStructureSrc + kComputeSrc;
}

// Kernel `name` of the source for values `vt` and indices `it`, without contraction as on the CPU.
Kernel sparse_kernel(DType vt, DType it, const char* name) { return nvrtc_kernel(source(vt, it), name, {"--fmad=false"}); }

int64_t grid(int64_t n) { return std::min<int64_t>((n + 255) / 256, int64_t(1) << 20); }

struct Kernels {
  Kernel check, record, coords, count, starts, place, order, main, store, vec4;
};

// The state a prepared step shares with its launches and its after-run check.
struct Step {
  SG g;
  std::string op, node;
  Kernels k;
  std::shared_ptr<Buffer> rec;         // device: {bad indices0, bad indices1, then the values quoted}
  std::shared_ptr<int64_t> rec_host;   // pinned copy, read after the run
  size_t er = 0, ec = 0, cnt = 0, rs = 0, perm = 0, acc = 0;  // scratch slots
  bool row_view = false;
  int64_t n = 0;  // dense columns of the products
};

std::string shape_text(const SG& g) { return shape_str({g.rows, g.cols}); }

// The first problem the CPU's serial check reports (kernels_sparse.cpp's validate).
void raise_recorded(const Step& p) {
  const int64_t* r = p.rec_host.get();
  const uint64_t none = ~0ull;
  const SG& g = p.g;
  const bool csc = g.storage == 2;
  auto bad = [&](const std::string& msg) { raise(ErrorKind::Index, p.op, p.node, msg); };
  if (uint64_t(r[0]) != none)
    bad(std::string(csc ? "row" : "column") + " index " + std::to_string(r[2]) + " (indices0[" + std::to_string(r[0]) +
        "]) is out of range for shape " + shape_text(g));
  if (g.storage == 0) {
    if (uint64_t(r[1]) != none)
      bad("row index " + std::to_string(r[3]) + " (indices1[" + std::to_string(r[1]) + "]) is out of range for shape " +
          shape_text(g));
    return;
  }
  const std::string what = csc ? "column starts (indices1)" : "row starts (indices1)";
  if (r[5] != 0) bad(what + "[0] is " + std::to_string(r[5]) + ", must be 0");
  if (uint64_t(r[1]) != none)
    bad(what + "[" + std::to_string(r[1]) + "] = " + std::to_string(r[3]) + " is less than " + what + "[" +
        std::to_string(r[1] - 1) + "] = " + std::to_string(r[4]));
  if (r[6] != g.nnz)
    bad(what + "[" + std::to_string(g.groups) + "] = " + std::to_string(r[6]) + " must equal the number of stored values " +
        std::to_string(g.nnz));
}

// `i0` is the input number of indices0; `row_view`: the step needs each row's entries in order.
std::shared_ptr<Step> prepare(const KernelCtx& c, size_t i0, DType vt, bool row_view) {
  auto p = std::make_shared<Step>();
  const SparseAttrs& a = typed_attrs<SparseAttrs>(c.node);
  p->op = c.node.op->name;
  p->node = c.node.name;
  SG& g = p->g;
  g.rows = a.rows;
  g.cols = a.cols;
  g.nnz = c.in[i0].shape[0];
  g.storage = a.storage == SparseStorage::COO ? 0 : a.storage == SparseStorage::CSR ? 1 : 2;
  g.groups = g.storage == 1 ? g.rows : g.storage == 2 ? g.cols : g.nnz;
  const DType it = c.in[i0].dtype;
  if (it != DType::Int32 && it != DType::Int64)
    raise(ErrorKind::Type, p->op, p->node, std::string("indices must be int32 or int64, got ") + dtype_name(it));
  auto kern = [&](const char* name) { return sparse_kernel(vt, it, name); };
  p->k.check = kern("check_idx");
  p->k.record = kern("record");
  p->k.coords = kern("coords");
  const size_t nnz1 = size_t(std::max<int64_t>(g.nnz, 1));
  p->er = c.scratch(nnz1 * sizeof(int64_t));
  p->ec = c.scratch(nnz1 * sizeof(int64_t));
  p->row_view = row_view;
  if (row_view) {
    p->k.count = kern("count_rows");
    p->k.starts = kern("row_starts");
    p->k.place = kern("place");
    p->k.order = kern("order_rows");
    p->cnt = c.scratch(size_t(std::max<int64_t>(g.rows, 1)) * sizeof(uint64_t));
    p->rs = c.scratch(size_t(g.rows + 1) * sizeof(int64_t));
    p->perm = c.scratch(nnz1 * sizeof(int64_t));
  }
  p->rec = device_alloc(7 * sizeof(int64_t));
  void* h = nullptr;
  check(cudaMallocHost(&h, 7 * sizeof(int64_t)), "allocating pinned memory for index checks");
  p->rec_host = std::shared_ptr<int64_t>(static_cast<int64_t*>(h), [](int64_t* q) { free_pinned(q); });
  std::fill(p->rec_host.get(), p->rec_host.get() + 7, int64_t(0));
  p->rec_host.get()[0] = p->rec_host.get()[1] = -1;
  c.after_run([p] { raise_recorded(*p); });
  return p;
}

// Checks the indices, computes each entry's (row, column) and, where asked, each row's entries
// in storage order; then copies the record to the host (ordered on `s`).
void launch_structure(Step& p, cudaStream_t s, const void* i0, const void* i1, void* const* out) {
  SG g = p.g;
  uint64_t* rec = static_cast<uint64_t*>(p.rec->data);
  fill_bytes(rec, 2, 8, ~0ull, s);
  const int64_t m = std::max(g.nnz, g.storage == 0 ? 0 : g.groups);
  void* er = out[p.er];
  void* ec = out[p.ec];
  void* cargs[] = {&g, &i0, &i1, &rec};
  launch(p.k.check, grid(m), 256, 0, s, cargs);
  launch(p.k.record, 1, 1, 0, s, cargs);
  void* xargs[] = {&g, &i0, &i1, &er, &ec};
  launch(p.k.coords, grid(g.nnz), 256, 0, s, xargs);
  check(cudaMemcpyAsync(p.rec_host.get(), rec, 7 * sizeof(int64_t), cudaMemcpyDeviceToHost, s), "reading index checks");
  if (!p.row_view) return;
  void* cnt = out[p.cnt];
  void* rs = out[p.rs];
  void* perm = out[p.perm];
  const size_t cnt_bytes = size_t(std::max<int64_t>(g.rows, 1)) * sizeof(uint64_t);
  check(cudaMemsetAsync(cnt, 0, cnt_bytes, s), "clearing sparse row counts");
  void* nargs[] = {&g, &er, &cnt};
  launch(p.k.count, grid(g.nnz), 256, 0, s, nargs);
  int64_t rows = g.rows;
  void* sargs[] = {&rows, &cnt, &rs};
  launch(p.k.starts, 1, 1024, 0, s, sargs);
  check(cudaMemsetAsync(cnt, 0, cnt_bytes, s), "clearing sparse row cursors");
  void* pargs[] = {&g, &er, &rs, &cnt, &perm};
  launch(p.k.place, grid(g.nnz), 256, 0, s, pargs);
  void* oargs[] = {&g, &rs, &perm};
  launch(p.k.order, grid(g.rows), 256, 0, s, oargs);
}

LaunchFn sparse_tensor_factory(const KernelCtx& c) {
  const DType vt = c.in[0].dtype;
  if (vt == DType::Bool) raise(ErrorKind::Type, c.node.op->name, c.node.name, "no cuda kernel for bool values");
  auto p = prepare(c, 1, vt, true);
  p->k.main = sparse_kernel(vt, c.in[1].dtype, "to_dense");
  const int64_t total = p->g.rows * p->g.cols;
  const bool half = is_half(vt);
  if (half) {
    p->k.store = sparse_kernel(vt, c.in[1].dtype, "store");
    p->acc = c.scratch(size_t(std::max<int64_t>(total, 1)) * sizeof(float));
  }
  const size_t acc_bytes = size_t(total) * (half ? sizeof(float) : dtype_size(vt));
  return [p, total, half, acc_bytes](cudaStream_t s, const void* const* in, void* const* out) {
    launch_structure(*p, s, in[1], in[2], out);
    if (total == 0) return;
    SG g = p->g;
    void* acc = half ? out[p->acc] : out[0];  // integers sum in place as their unsigned type
    check(cudaMemsetAsync(acc, 0, acc_bytes, s), "zeroing a dense matrix");  // zero bits are 0 in every dtype
    const void *v = in[0], *rs = out[p->rs], *perm = out[p->perm], *ec = out[p->ec];
    void* args[] = {&g, &v, &rs, &perm, &ec, &acc};
    launch(p->k.main, grid(g.rows), 256, 0, s, args);
    if (half) {
      int64_t n = total;
      void* o = out[0];
      void* sargs[] = {&n, &acc, &o};
      launch(p->k.store, grid(n), 256, 0, s, sargs);
    }
  };
}

LaunchFn sparse_gather_factory(const KernelCtx& c) {
  const DType vt = c.in[0].dtype;
  auto p = prepare(c, 1, vt, false);
  p->k.main = sparse_kernel(vt, c.in[1].dtype, "gather");
  return [p](cudaStream_t s, const void* const* in, void* const* out) {
    launch_structure(*p, s, in[1], in[2], out);
    SG g = p->g;
    const void *d = in[0], *er = out[p->er], *ec = out[p->ec];
    void* o = out[0];
    void* args[] = {&g, &d, &er, &ec, &o};
    launch(p->k.main, grid(g.nnz), 256, 0, s, args);
  };
}

void require_float(const KernelCtx& c, DType t) {
  if (t != DType::Float32 && t != DType::Float16 && t != DType::BFloat16)
    raise(ErrorKind::Type, c.node.op->name, c.node.name, std::string("no cuda kernel for dtype ") + dtype_name(t));
}

LaunchFn sparse_matmul_factory(const KernelCtx& c) {
  const DType vt = c.in[0].dtype;
  require_float(c, vt);
  // csr reads each row's entries where they are stored (MPSGRAPH_CUDA_SPMM_CSR=0: through the
  // row view, as coo and csc; read at compile, tests compare): the same sums in the same order
  const bool csr =
      typed_attrs<SparseAttrs>(c.node).storage == SparseStorage::CSR && !switched_off("MPSGRAPH_CUDA_SPMM_CSR");
  auto p = prepare(c, 1, vt, !csr);
  p->n = c.in[3].shape[1];
  p->k.main = sparse_kernel(vt, c.in[1].dtype, csr ? "spmm_csr" : "spmm");
  const bool vec4 = csr && vt == DType::Float32 && p->n % 4 == 0;
  if (vec4) p->k.vec4 = sparse_kernel(vt, c.in[1].dtype, "spmm_csr4");
  return [p, csr, vec4](cudaStream_t s, const void* const* in, void* const* out) {
    launch_structure(*p, s, in[1], in[2], out);
    SG g = p->g;
    int64_t n = p->n;
    const void *v = in[0], *d = in[3], *ec = out[p->ec];
    void* o = out[0];
    if (csr) {
      const void* starts = in[2];
      void* args[] = {&g, &n, &v, &d, &starts, &ec, &o};
      // (a feed's pointer may sit anywhere: checked on every run)
      if (vec4 && (reinterpret_cast<uintptr_t>(d) | reinterpret_cast<uintptr_t>(o)) % 16 == 0)
        return launch(p->k.vec4, grid(g.rows * (n / 4)), 256, 0, s, args);
      return launch(p->k.main, grid(g.rows * n), 256, 0, s, args);
    }
    const void *rs = out[p->rs], *perm = out[p->perm];
    void* args[] = {&g, &n, &v, &d, &rs, &perm, &ec, &o};
    launch(p->k.main, grid(g.rows * n), 256, 0, s, args);
  };
}

LaunchFn sparse_sampled_matmul_factory(const KernelCtx& c) {
  const DType vt = c.in[0].dtype;
  require_float(c, vt);
  auto p = prepare(c, 2, vt, false);
  p->n = c.in[0].shape[1];
  p->k.main = sparse_kernel(vt, c.in[2].dtype, "sddmm");
  return [p](cudaStream_t s, const void* const* in, void* const* out) {
    launch_structure(*p, s, in[2], in[3], out);
    SG g = p->g;
    int64_t n = p->n;
    const void *x = in[0], *y = in[1], *er = out[p->er], *ec = out[p->ec];
    void* o = out[0];
    void* args[] = {&g, &n, &x, &y, &er, &ec, &o};
    launch(p->k.main, grid(g.nnz), 256, 0, s, args);
  };
}

}  // namespace

void register_sparse_kernels() {
  register_kernel("sparse_tensor", sparse_tensor_factory);
  register_kernel("sparse_gather", sparse_gather_factory);
  register_kernel("sparse_matmul", sparse_matmul_factory);
  register_kernel("sparse_sampled_matmul", sparse_sampled_matmul_factory);
}

}  // namespace mg::cuda
