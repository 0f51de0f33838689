// Sparse family: 2-D sparse matrices as MPSGraph has them (sparseTensorWithType:tensors:shape:
// dataType:): three tensors (values, indices0, indices1) in one of the storages of
// MPSGraphSparseStorageType (sparse_attrs.h gives the order of the parts per storage).
//
//   sparse_tensor          the dense matrix of the parts (MPSGraph's op); duplicate entries add up
//   sparse_matmul          sparse (rows, cols) @ dense (cols, n) without forming the dense matrix
//   sparse_gather          dense (rows, cols) read at the stored entries: (nnz,)
//   sparse_sampled_matmul  x (rows, n), y (cols, n): dot(x[row], y[col]) at each stored entry
//
// The four are closed under differentiation: the gradient of sparse_tensor is sparse_gather
// and back; sparse_matmul's is sparse_sampled_matmul (values) and sparse_matmul with the
// transposed structure (dense), which uses the same arrays (csr <-> csc, coo's indices swapped).
// Indices are int32 or int64 and never differentiated. The dense shape is an attribute, known
// when the graph is built; the number of stored entries may be unknown until run time. Index
// values are checked when the kernel runs (out of range, malformed starts: an error naming the op).
#include <cctype>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/ops/common.h"
#include "core/ops/sparse_attrs.h"

namespace mg::ops {

namespace {

using Ints = std::vector<int64_t>;

const char* storage_name(SparseStorage s) {
  return s == SparseStorage::COO ? "coo" : s == SparseStorage::CSC ? "csc" : "csr";
}

bool compatible(int64_t a, int64_t b) { return a < 0 || b < 0 || a == b; }

std::vector<AttrSpec> sparse_attrs() {
  return {attr("storage", AttrKind::String, AttrNone{},
               "MPSGraphSparseStorageType: 'coo' (indices0 = column, indices1 = row of each entry), 'csc' "
               "(indices0 = row of each entry, indices1 = column starts, cols + 1) or 'csr' (indices0 = column of "
               "each entry, indices1 = row starts, rows + 1)"),
          attr("shape", AttrKind::Shape, AttrNone{}, "the dense shape (rows, cols)")};
}

// Checks storage, shape and the index parts (inputs i0, i1); `nnz` is the number of stored
// entries where another input gives it (-1: unknown). Normalises storage to lower case and
// returns the decoded attributes; nnz is updated from the index lengths.
SparseAttrs check_structure(InferCtx& c, size_t i0, size_t i1, int64_t& nnz) {
  std::string st = c.s("storage");
  for (auto& ch : st) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  SparseAttrs a;
  if (st == "coo") a.storage = SparseStorage::COO;
  else if (st == "csc") a.storage = SparseStorage::CSC;
  else if (st == "csr") a.storage = SparseStorage::CSR;
  else c.fail(ErrorKind::Value, "storage must be 'coo', 'csc' or 'csr', not '" + c.s("storage") + "'");
  c.attrs["storage"] = st;
  const Ints& sh = c.ints("shape");
  if (sh.size() != 2) c.fail(ErrorKind::Value, "shape must be 2-D (rows, cols), got " + shape_str(sh));
  if (sh[0] < 0 || sh[1] < 0) c.fail(ErrorKind::Value, "shape " + shape_str(sh) + " must be known and non-negative");
  a.rows = sh[0];
  a.cols = sh[1];
  for (size_t k : {i0, i1}) {
    const TensorType& t = c.in[k];
    if (t.dtype != DType::Int32 && t.dtype != DType::Int64)
      c.fail(ErrorKind::Type, "expects int32 or int64 '" + c.op.inputs[k].name + "', got " + type_str(t));
    if (t.shape.size() != 1) c.fail(ErrorKind::Value, "'" + c.op.inputs[k].name + "' must be 1-D, got " + type_str(t));
  }
  if (c.in[i0].dtype != c.in[i1].dtype)
    c.fail(ErrorKind::Type, "indices0 and indices1 must have one dtype, got " + type_str(c.in[i0]) + " and " +
                                type_str(c.in[i1]));
  auto entries = [&](int64_t len, const std::string& what) {
    if (!compatible(nnz, len))
      c.fail(ErrorKind::Value, what + " has " + std::to_string(len) + " entries but there are " +
                                   std::to_string(nnz) + " stored values");
    if (nnz < 0) nnz = len;
  };
  const int64_t n0 = c.in[i0].shape[0], n1 = c.in[i1].shape[0];
  entries(n0, "indices0 " + type_str(c.in[i0]));
  if (a.storage == SparseStorage::COO) {
    entries(n1, "indices1 " + type_str(c.in[i1]));
  } else {
    const bool csr = a.storage == SparseStorage::CSR;
    const int64_t want = (csr ? a.rows : a.cols) + 1;
    if (!compatible(n1, want))
      c.fail(ErrorKind::Value, std::string(csr ? "csr indices1 (row starts)" : "csc indices1 (column starts)") +
                                   " needs " + (csr ? "rows" : "cols") + " + 1 = " + std::to_string(want) +
                                   " entries for shape " + shape_str(sh) + ", got " + type_str(c.in[i1]));
  }
  return a;
}

int64_t values_length(InferCtx& c, size_t v) {
  if (c.in[v].shape.size() != 1)
    c.fail(ErrorKind::Value, "'values' must be 1-D (one value per stored entry), got " + type_str(c.in[v]));
  return c.in[v].shape[0];
}

// A rank-2 operand `k` whose dim `d` must be `want`.
void check_matrix(InferCtx& c, size_t k, size_t d, int64_t want, const std::string& what) {
  const TensorType& t = c.in[k];
  if (t.shape.size() != 2) c.fail(ErrorKind::Value, "'" + c.op.inputs[k].name + "' must be 2-D, got " + type_str(t));
  if (!compatible(t.shape[d], want))
    c.fail(ErrorKind::Value, "'" + c.op.inputs[k].name + "' " + type_str(t) + " does not match " + what);
}

SparseAttrs decode_sparse(const Attrs& a) {
  SparseAttrs r;
  const std::string& s = get_attr<std::string>(a, "storage");
  r.storage = s == "csr" ? SparseStorage::CSR : s == "csc" ? SparseStorage::CSC : SparseStorage::COO;
  const Ints& sh = get_attr<Ints>(a, "shape");
  r.rows = sh.at(0);
  r.cols = sh.at(1);
  return r;
}

// The structure attributes of the node's op (storage, shape), as given or transposed.
Attrs structure(const Node& n, bool transpose) {
  const SparseAttrs& a = typed_attrs<SparseAttrs>(n);
  if (!transpose) return {{"storage", std::string(storage_name(a.storage))}, {"shape", Ints{a.rows, a.cols}}};
  return {{"storage", std::string(storage_name(transposed_storage(a.storage)))}, {"shape", Ints{a.cols, a.rows}}};
}

// indices0, indices1 of the transposed structure: coo swaps them, csr/csc keep them.
std::pair<ValueRef, ValueRef> transposed_indices(const Node& n, ValueRef i0, ValueRef i1) {
  if (typed_attrs<SparseAttrs>(n).storage == SparseStorage::COO) return {i1, i0};
  return {i0, i1};
}

// ---- sparse_tensor ----

std::vector<TensorType> infer_sparse_tensor(InferCtx& c) {
  require_class(c, 0, kNumeric);
  int64_t nnz = values_length(c, 0);
  SparseAttrs a = check_structure(c, 1, 2, nnz);
  if (c.has("dtype") && c.dtype("dtype") != c.in[0].dtype)
    c.fail(ErrorKind::Type, std::string("dtype ") + dtype_name(c.dtype("dtype")) + " differs from the values' " +
                                type_str(c.in[0]) + "; cast the values");
  return {TensorType{c.in[0].dtype, {a.rows, a.cols}}};
}

std::vector<ValueRef> grad_sparse_tensor(GradCtx& c) {
  if (!c.dy[0].valid()) return {ValueRef{}, ValueRef{}, ValueRef{}};
  return {call(c.g, "sparse_gather", {c.dy[0], c.x(1), c.x(2)}, structure(c.node, false)), ValueRef{}, ValueRef{}};
}

// ---- sparse_gather ----

std::vector<TensorType> infer_sparse_gather(InferCtx& c) {
  require_class(c, 0, kNumeric);
  int64_t nnz = -1;
  SparseAttrs a = check_structure(c, 1, 2, nnz);
  check_matrix(c, 0, 0, a.rows, "the sparse shape " + shape_str({a.rows, a.cols}));
  check_matrix(c, 0, 1, a.cols, "the sparse shape " + shape_str({a.rows, a.cols}));
  return {TensorType{c.in[0].dtype, {nnz}}};
}

std::vector<ValueRef> grad_sparse_gather(GradCtx& c) {
  if (!c.dy[0].valid()) return {ValueRef{}, ValueRef{}, ValueRef{}};
  return {call(c.g, "sparse_tensor", {c.dy[0], c.x(1), c.x(2)}, structure(c.node, false)), ValueRef{}, ValueRef{}};
}

// ---- sparse_matmul ----

std::vector<TensorType> infer_sparse_matmul(InferCtx& c) {
  require_class(c, 0, kFloat);
  c.same_dtype(0, 3);
  int64_t nnz = values_length(c, 0);
  SparseAttrs a = check_structure(c, 1, 2, nnz);
  check_matrix(c, 3, 0, a.cols, "the sparse matrix's " + shape_str({a.rows, a.cols}) + " (inner dimensions differ)");
  return {TensorType{c.in[0].dtype, {a.rows, c.in[3].shape[1]}}};
}

std::vector<ValueRef> grad_sparse_matmul(GradCtx& c) {
  if (!c.dy[0].valid()) return {ValueRef{}, ValueRef{}, ValueRef{}, ValueRef{}};
  Graph& g = c.g;
  ValueRef dvalues = call(g, "sparse_sampled_matmul", {c.dy[0], c.x(3), c.x(1), c.x(2)}, structure(c.node, false));
  auto [t0, t1] = transposed_indices(c.node, c.x(1), c.x(2));
  ValueRef ddense = call(g, "sparse_matmul", {c.x(0), t0, t1, c.dy[0]}, structure(c.node, true));
  return {dvalues, ValueRef{}, ValueRef{}, ddense};
}

// ---- sparse_sampled_matmul ----

std::vector<TensorType> infer_sparse_sampled_matmul(InferCtx& c) {
  require_class(c, 0, kFloat);
  c.same_dtype(0, 1);
  int64_t nnz = -1;
  SparseAttrs a = check_structure(c, 2, 3, nnz);
  check_matrix(c, 0, 0, a.rows, "the rows of the sparse shape " + shape_str({a.rows, a.cols}));
  check_matrix(c, 1, 0, a.cols, "the columns of the sparse shape " + shape_str({a.rows, a.cols}));
  if (!compatible(c.in[0].shape[1], c.in[1].shape[1]))
    c.fail(ErrorKind::Value, "x " + type_str(c.in[0]) + " and y " + type_str(c.in[1]) + " differ in their last dim");
  return {TensorType{c.in[0].dtype, {nnz}}};
}

std::vector<ValueRef> grad_sparse_sampled_matmul(GradCtx& c) {
  if (!c.dy[0].valid()) return {ValueRef{}, ValueRef{}, ValueRef{}, ValueRef{}};
  Graph& g = c.g;
  ValueRef dx = call(g, "sparse_matmul", {c.dy[0], c.x(2), c.x(3), c.x(1)}, structure(c.node, false));
  auto [t0, t1] = transposed_indices(c.node, c.x(2), c.x(3));
  ValueRef dy = call(g, "sparse_matmul", {c.dy[0], t0, t1, c.x(0)}, structure(c.node, true));
  return {dx, dy, ValueRef{}, ValueRef{}};
}

InputSpec index_input(const char* name) { return {name, false, false, InputRole::Index}; }

}  // namespace

void register_sparse_ops() {
  register_op({.name = "sparse_tensor",
               .doc = "The dense (rows, cols) matrix of a sparse one given as (values, indices0, indices1) in "
                      "MPSGraph's order for `storage` (MPSGraph's sparseTensorWithType:tensors:shape:dataType:): "
                      "'coo': indices0 = column (x), indices1 = row (y) of each entry; 'csr': indices0 = column of "
                      "each entry, indices1 = row starts (rows + 1, from 0 to nnz, non-decreasing); 'csc': indices0 = "
                      "row of each entry, indices1 = column starts (cols + 1). Entries at the same position add up "
                      "(as scipy.sparse). Indices int32 or int64; an index out of range or malformed starts raise "
                      "GraphIndexError when the graph runs. dtype, if given, must be the values' dtype. "
                      "Graph.sparse_tensor wraps the parts in a SparseTensor; this is its to_dense().",
               .inputs = {{"values"}, index_input("indices0"), index_input("indices1")},
               .attrs = [] {
                 auto a = sparse_attrs();
                 a.push_back(optional_attr("dtype", AttrKind::DType, "the values' dtype (MPSGraph's dataType)"));
                 return a;
               }(),
               .decode = attr_decoder(decode_sparse),
               .infer = infer_sparse_tensor,
               .grad = grad_sparse_tensor,
               .aliases = {"sparse_to_dense"},
               .family = "sparse"});
  register_op({.name = "sparse_gather",
               .doc = "The entries of dense (rows, cols) at the stored positions of a sparse structure "
                      "(indices0, indices1, storage, shape as in sparse_tensor): one value per stored entry, in "
                      "storage order. The transpose of sparse_tensor (the gradient of each is the other).",
               .inputs = {{"dense"}, index_input("indices0"), index_input("indices1")},
               .attrs = sparse_attrs(),
               .decode = attr_decoder(decode_sparse),
               .infer = infer_sparse_gather,
               .grad = grad_sparse_gather,
               .family = "sparse"});
  register_op({.name = "sparse_matmul",
               .doc = "Sparse (rows, cols) @ dense (cols, n) -> (rows, n), the sparse matrix given as in "
                      "sparse_tensor; computed from the stored entries without forming the dense matrix "
                      "(duplicates add up). Float dtypes. Graph.sparse_matmul(a, b) takes a SparseTensor on either "
                      "side.",
               .inputs = {{"values"}, index_input("indices0"), index_input("indices1"), {"dense"}},
               .attrs = sparse_attrs(),
               .decode = attr_decoder(decode_sparse),
               .infer = infer_sparse_matmul,
               .grad = grad_sparse_matmul,
               .python_method = false,
               .family = "sparse"});
  register_op({.name = "sparse_sampled_matmul",
               .doc = "x (rows, n) and y (cols, n): dot(x[row], y[col]) for each stored entry (row, col) of a "
                      "sparse structure (indices0, indices1, storage, shape = (rows, cols) as in sparse_tensor), "
                      "i.e. x @ y.T read at the stored entries, without forming it (SDDMM). The gradient of "
                      "sparse_matmul with respect to the values.",
               .inputs = {{"x"}, {"y"}, index_input("indices0"), index_input("indices1")},
               .attrs = sparse_attrs(),
               .decode = attr_decoder(decode_sparse),
               .infer = infer_sparse_sampled_matmul,
               .grad = grad_sparse_sampled_matmul,
               .family = "sparse"});
}

}  // namespace mg::ops
