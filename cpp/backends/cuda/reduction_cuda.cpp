// CUDA reductions: one generated kernel per (op, dtype); one block per output element, its
// threads striding over the reduced elements, then a tree in shared memory. variance and
// logsumexp make their second pass in the same block. Semantics follow the CPU kernels:
// integer sums and products wrap, maximum/minimum propagate NaN, arg reductions take the
// first index of the extreme value (the first NaN if any).
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/cuda_internal.h"
#include "core/error.h"
#include "core/registry.h"
#include "core/ops/reduction_attrs.h"
#include "core/typed_attrs.h"

namespace mg::cuda {

namespace {

struct RedSpace {
  int64_t n_out = 0, n_red = 0;
  int32_t orank = 0, rrank = 0;
  int64_t oshape[kMaxRank] = {}, ostride[kMaxRank] = {}, rshape[kMaxRank] = {}, rstride[kMaxRank] = {};
};

const char* kRedDevice = R"(
struct Red { i64 n_out, n_red; int orank, rrank; i64 oshape[8], ostride[8], rshape[8], rstride[8]; };
__device__ __forceinline__ i64 mg_off(i64 j, int rank, const i64* shape, const i64* stride) {
  i64 o = 0;
  for (int d = rank - 1; d >= 0; --d) { const i64 q = j / shape[d]; o += (j - q * shape[d]) * stride[d]; j = q; }
  return o;
}
)";

// One pass: accumulator type A, its initial value, add (acc, x of type C, index j), combine.
struct Pass {
  std::string A, init, add, combine;
};

std::string pass_code(const Pass& p, const std::string& load, const std::string& result) {
  std::string c;
  c += "    { " + p.A + " acc = " + p.init + ";\n";
  c += "      for (i64 j = threadIdx.x; j < r.n_red; j += blockDim.x) { const C x = " + load +
       "; acc = " + p.add + "; }\n";
  c += "      sh_" + p.A + "[threadIdx.x] = acc; __syncthreads();\n";
  c += "      for (int w = blockDim.x / 2; w > 0; w >>= 1) {\n";
  c += "        if (threadIdx.x < w) { const " + p.A + " a = sh_" + p.A + "[threadIdx.x], b = sh_" + p.A +
       "[threadIdx.x + w]; sh_" + p.A + "[threadIdx.x] = " + p.combine + "; }\n        __syncthreads();\n      }\n";
  c += "      " + result + " = sh_" + p.A + "[0]; __syncthreads(); }\n";
  return c;
}

LaunchFn make_reduction(const KernelCtx& c, const std::vector<int64_t>& axes, const std::vector<Pass>& passes,
                        const std::string& emit, const std::string& extra_types) {
  const Shape& in = c.in[0].shape;
  const DType dt = c.in[0].dtype, odt = c.out[0].dtype;
  RedSpace rs;
  const auto st = contiguous_strides(in);
  std::vector<char> red(in.size(), 0);
  for (auto a : axes) red[size_t(a)] = 1;
  rs.n_out = 1;
  rs.n_red = 1;
  for (size_t d = 0; d < in.size(); ++d) {
    if (in[d] == 1) continue;
    if (red[d]) {
      if (rs.rrank == kMaxRank) raise(ErrorKind::NotImplemented, c.node.op->name, c.node.name, "more than 8 reduced dims on cuda");
      rs.rshape[rs.rrank] = in[d];
      rs.rstride[rs.rrank++] = st[d];
      rs.n_red *= in[d];
    } else {
      if (rs.orank == kMaxRank) raise(ErrorKind::NotImplemented, c.node.op->name, c.node.name, "more than 8 kept dims on cuda");
      rs.oshape[rs.orank] = in[d];
      rs.ostride[rs.orank++] = st[d];
      rs.n_out *= in[d];
    }
  }
  for (size_t d = 0; d < in.size(); ++d)
    if (in[d] == 0) (red[d] ? rs.n_red : rs.n_out) = 0;
  std::string src = prelude() + kRedDevice + "typedef " + compute_type(dt) + " C;\n" + extra_types;
  src += "extern \"C\" __global__ void k(Red r, const " + storage_type(dt) + "* __restrict__ in, " + storage_type(odt) +
         "* __restrict__ out) {\n";
  std::vector<std::string> declared;
  for (auto& p : passes)
    if (std::find(declared.begin(), declared.end(), p.A) == declared.end()) {
      declared.push_back(p.A);
      src += "  __shared__ " + p.A + " sh_" + p.A + "[256];\n";
    }
  src += "  for (i64 o = blockIdx.x; o < r.n_out; o += gridDim.x) {\n";
  src += "    const i64 base = mg_off(o, r.orank, r.oshape, r.ostride);\n";
  const std::string load = load_expr(dt, "in[base + mg_off(j, r.rrank, r.rshape, r.rstride)]");
  for (size_t k = 0; k < passes.size(); ++k) {
    src += "    " + passes[k].A + " m" + std::to_string(k) + ";\n";
    src += pass_code(passes[k], load, "m" + std::to_string(k));
  }
  src += "    if (threadIdx.x == 0) out[o] = " + store_expr(odt, emit) + ";\n  }\n}\n";
  Kernel kern = nvrtc_kernel(src, "k");
  const int threads = rs.n_red >= 256 ? 256 : rs.n_red >= 64 ? 64 : 32;
  // an empty reduction emits the passes' initial values (every thread skips its loop)
  return [kern, rs, threads](cudaStream_t s, const void* const* in, void* const* out) {
    if (rs.n_out == 0) return;
    RedSpace r = rs;
    const void* x = in[0];
    void* o = out[0];
    void* args[] = {&r, &x, &o};
    launch(kern, std::min<int64_t>(rs.n_out, int64_t(1) << 20), threads, 0, s, args);
  };
}

bool is_float_class(DType t) { return is_floating(t); }

std::string sum_acc(DType t) { return is_float_class(t) ? "float" : "u64"; }

LaunchFn reduce_factory(const KernelCtx& c) {
  const std::string& op = c.node.op->name;
  const DType dt = c.in[0].dtype;
  const auto& axes = typed_attrs<ops::ReductionAttrs>(c.node).axes;
  const bool fl = is_float_class(dt), boolean = dt == DType::Bool;
  auto no_kernel = [&]() -> LaunchFn {
    raise(ErrorKind::Type, op, c.node.name, std::string("no cuda kernel for ") + dtype_name(dt));
  };
  if (op == "reduction_sum" || op == "reduction_product") {
    if (boolean) return no_kernel();
    const bool prod = op == "reduction_product";
    const std::string A = sum_acc(dt);
    const std::string x = fl ? "x" : "(u64)x";
    Pass p{A, prod ? A + "(1)" : A + "(0)", prod ? "acc * " + x : "acc + " + x, prod ? "a * b" : "a + b"};
    return make_reduction(c, axes, {p}, fl ? "m0" : "C(m0)", "");
  }
  if (op == "reduction_maximum" || op == "reduction_minimum") {
    const bool mx = op == "reduction_maximum";
    for (auto a : axes)
      if (c.in[0].shape[size_t(a)] == 0 && num_elements(c.out[0].shape) > 0)
        raise(ErrorKind::Value, op, c.node.name, "zero-size reduction has no identity");
    if (boolean) {
      Pass p{"bool", mx ? "false" : "true", mx ? "acc || x" : "acc && x", mx ? "a || b" : "a && b"};
      return make_reduction(c, axes, {p}, "m0", "");
    }
    std::string init;
    if (fl) init = mx ? "-__int_as_float(0x7f800000)" : "__int_as_float(0x7f800000)";
    else {
      const bool sgn = is_signed_integer(dt);
      const size_t bits = dtype_size(dt) * 8;
      if (mx) init = sgn ? "C(1ull << " + std::to_string(bits - 1) + ")" : "C(0)";
      else init = sgn ? "C((1ull << " + std::to_string(bits - 1) + ") - 1)" : "C(~0ull)";
    }
    const std::string f = fl ? (mx ? "mg_maxf" : "mg_minf") : "";
    Pass p{"C", init, fl ? f + "(acc, x)" : (mx ? "(x > acc ? x : acc)" : "(x < acc ? x : acc)"),
           fl ? f + "(a, b)" : (mx ? "(b > a ? b : a)" : "(b < a ? b : a)")};
    return make_reduction(c, axes, {p}, "m0", "");
  }
  if (op == "reduction_and" || op == "reduction_or") {
    const bool a = op == "reduction_and";
    const std::string nz = fl ? "(x != 0.f)" : "(x != 0)";
    Pass p{"bool", a ? "true" : "false", a ? "acc && " + nz : "acc || " + nz, a ? "a && b" : "a || b"};
    return make_reduction(c, axes, {p}, "m0", "");
  }
  if (!fl) return no_kernel();
  if (op == "mean") {
    Pass p{"float", "0.f", "acc + x", "a + b"};
    return make_reduction(c, axes, {p}, "m0 / (float)r.n_red", "");
  }
  if (op == "variance") {
    Pass p1{"float", "0.f", "acc + x", "a + b"};
    Pass p2{"float", "0.f", "acc + (x - m0 / (float)r.n_red) * (x - m0 / (float)r.n_red)", "a + b"};
    return make_reduction(c, axes, {p1, p2}, "m1 / (float)r.n_red", "");
  }
  if (op == "logsumexp") {
    Pass p1{"float", "-__int_as_float(0x7f800000)", "mg_maxf(acc, x)", "mg_maxf(a, b)"};
    Pass p2{"float", "0.f", "acc + expf(x - m0)", "a + b"};
    return make_reduction(c, axes, {p1, p2}, "(fabsf(m0) < __int_as_float(0x7f800000) ? m0 + logf(m1) : m0)", "");
  }
  return no_kernel();
}

LaunchFn arg_factory(const KernelCtx& c) {
  const std::string& op = c.node.op->name;
  const DType dt = c.in[0].dtype;
  if (dt == DType::Bool) raise(ErrorKind::Type, op, c.node.name, "no cuda kernel for bool");
  const auto& at = typed_attrs<ops::ArgReductionAttrs>(c.node);
  if (c.in[0].shape[size_t(at.axis)] == 0 && num_elements(c.out[0].shape) > 0)
    raise(ErrorKind::Value, op, c.node.name, "zero-size reduction has no identity");
  const bool mx = op == "reduction_arg_maximum";
  const std::string types = std::string("struct AV { C v; i64 i; };\n") +
                            "__device__ __forceinline__ AV comb(AV a, AV b) {\n"
                            "  if (b.i < 0) return a; if (a.i < 0) return b;\n"
                            "  const bool an = a.v != a.v, bn = b.v != b.v;\n"
                            "  if (an || bn) { if (an && bn) return a.i < b.i ? a : b; return an ? a : b; }\n" +
                            "  if (" + (mx ? "b.v > a.v" : "b.v < a.v") + ") return b;\n" +
                            "  if (b.v == a.v && b.i < a.i) return b;\n  return a;\n}\n";
  Pass p{"AV", "AV{C(0), -1}", "comb(acc, AV{x, j})", "comb(a, b)"};
  return make_reduction(c, {at.axis}, {p}, "(m0.i < 0 ? 0 : m0.i)", types);
}

// sum_to_like: x summed over the dims it was broadcast along to reach its input's shape
// (output element order is the kept dims' order, as for any reduction).
LaunchFn sum_to_like_factory(const KernelCtx& c) {
  const DType dt = c.in[0].dtype;
  if (dt == DType::Bool) raise(ErrorKind::Type, "sum_to_like", c.node.name, "bool is not summable");
  const Shape& xs = c.in[0].shape;
  const Shape& os = c.out[0].shape;
  std::vector<int64_t> axes;
  const size_t lead = xs.size() - os.size();
  for (size_t d = 0; d < xs.size(); ++d)
    if (d < lead || (os[d - lead] == 1 && xs[d] != 1)) axes.push_back(int64_t(d));
  const bool fl = is_float_class(dt);
  const std::string A = sum_acc(dt);
  Pass p{A, A + "(0)", fl ? "acc + x" : "acc + (u64)x", "a + b"};
  return make_reduction(c, axes, {p}, fl ? "m0" : "C(m0)", "");
}

}  // namespace

void register_reduction_kernels() {
  register_kernel("sum_to_like", sum_to_like_factory);
  for (const char* op : {"reduction_sum", "reduction_product", "reduction_maximum", "reduction_minimum", "reduction_and",
                         "reduction_or", "mean", "variance", "logsumexp"})
    register_kernel(op, reduce_factory);
  register_kernel("reduction_arg_maximum", arg_factory);
  register_kernel("reduction_arg_minimum", arg_factory);
}

}  // namespace mg::cuda
