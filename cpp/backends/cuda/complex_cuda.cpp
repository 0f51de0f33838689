// CUDA kernels for complex64 (complex128 is refused like float64): the complex ops
// (real_part, imaginary_part, angle, conjugate, complex) and the complex cases of the
// elementwise ops, cast and the ops linear in each part, with the CPU's formulas
// (backends/cpu/kernels_complex.cpp). complex64 is stored as (real, imaginary) float pairs; ops
// linear in each part run their real kernel on the parts (a complex tensor of shape s is a
// float32 one of shape s + (2,)); shape ops are byte copies and need nothing here.
#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_internal.h"
#include "core/error.h"

namespace mg::cuda {

namespace {

bool any_complex(const KernelCtx& c) {
  auto cx = [](const TensorType& t) { return is_complex(t.dtype); };
  return std::any_of(c.in.begin(), c.in.end(), cx) || std::any_of(c.out.begin(), c.out.end(), cx);
}

// op's kernel for real dtypes stays; complex ones go to `cx`.
void extend(const std::string& op, KernelFactory cx) {
  KernelFactory real = registered_kernel(op);
  if (!real) raise(ErrorKind::Runtime, "cuda", "", "no cuda kernel to extend to complex: " + op);
  register_kernel(op, [real, cx](const KernelCtx& c) { return any_complex(c) ? cx(c) : real(c); });
}

// Complex tensors as float pairs along a new last axis; real ones (predicates) get a size-1
// last axis so that they broadcast against the pairs.
TensorType pair_view(const TensorType& t) {
  TensorType r{complex_part_dtype(t.dtype), t.shape};
  r.shape.push_back(is_complex(t.dtype) ? 2 : 1);
  return r;
}

void extend_by_parts(const std::string& op) {
  KernelFactory real = registered_kernel(op);
  extend(op, [real](const KernelCtx& c) {
    auto views = [](const std::vector<TensorType>& ts) {
      std::vector<TensorType> r(ts.size());
      std::transform(ts.begin(), ts.end(), r.begin(), pair_view);
      return r;
    };
    const std::vector<TensorType> in = views(c.in), out = views(c.out);
    KernelCtx rc{c.node, in, out};
    LaunchFn f = real(rc);
    for (size_t nbytes : rc.scratch_bytes) c.scratch(nbytes);  // same indices: as many outputs
    for (auto& chk : rc.checks) c.after_run(std::move(chk));
    return f;
  });
}

const char* kComplexPrelude = R"(
struct alignas(8) cf { float re, im; };
__device__ __forceinline__ cf mk(float a, float b) { cf r; r.re = a; r.im = b; return r; }
__device__ __forceinline__ cf cmul(cf a, cf b) { return mk(a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re); }
// in double: |b|^2 neither overflows nor underflows for float parts
__device__ __forceinline__ cf cdiv(cf a, cf b) {
  const double c = b.re, d = b.im, den = c * c + d * d;
  return mk((float)(((double)a.re * c + (double)a.im * d) / den), (float)(((double)a.im * c - (double)a.re * d) / den));
}
__device__ __forceinline__ cf cexp(cf z) {
  const float e = expf(z.re);
  if (z.im == 0.f) return mk(e, z.im);
  float s, c;
  sincosf(z.im, &s, &c);
  return mk(e * c, e * s);
}
)";

// A kernel over the broadcast space of the output: operand k is x, y (complex: cf; real: its
// compute type), out = expr (cf for a complex output, else the output's compute type).
LaunchFn complex_map(const KernelCtx& c, const std::string& expr) {
  std::vector<Shape> shapes;
  for (auto& t : c.in) shapes.push_back(t.shape);
  const IndexSpace sp = broadcast_space(c.out[0].shape, shapes);
  const DType odt = c.out[0].dtype;
  const size_t nin = c.in.size();
  std::string params, loads;
  for (size_t k = 0; k < nin; ++k) {
    const DType t = c.in[k].dtype;
    const std::string a = "a" + std::to_string(k), o = "o" + std::to_string(k), v = k == 0 ? "x" : "y";
    params += ", const " + (is_complex(t) ? std::string("cf") : storage_type(t)) + "* __restrict__ " + a;
    loads += "    const " + (is_complex(t) ? std::string("cf") : compute_type(t)) + " " + v + " = " +
             (is_complex(t) ? a + "[" + o + "]" : load_expr(t, a + "[" + o + "]")) + ";\n";
  }
  std::string src = prelude() + kComplexPrelude + "extern \"C\" __global__ void k(Space s" + params + ", " +
                    (is_complex(odt) ? std::string("cf") : storage_type(odt)) + "* __restrict__ out) {\n" +
                    "  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < s.n; i += (i64)gridDim.x * blockDim.x) {\n" +
                    "    i64 rem = i, o0 = 0, o1 = 0;\n" +
                    "    for (int d = s.rank - 1; d >= 0; --d) {\n" +
                    "      const i64 q = rem / s.shape[d], j = rem - q * s.shape[d];\n" +
                    "      rem = q; o0 += j * s.stride[0][d]; o1 += j * s.stride[1][d];\n    }\n" + loads +
                    "    out[i] = " + (is_complex(odt) ? expr : store_expr(odt, expr)) + ";\n  }\n}\n";
  Kernel kern = nvrtc_kernel(src, "k");
  return [kern, sp, nin](cudaStream_t st, const void* const* in, void* const* out) {
    if (sp.n == 0) return;
    IndexSpace s = sp;
    const void* a0 = in[0];
    const void* a1 = nin > 1 ? in[1] : nullptr;
    void* o = out[0];
    void* args2[] = {&s, &a0, &o};
    void* args3[] = {&s, &a0, &a1, &o};
    launch(kern, std::min<int64_t>((sp.n + 255) / 256, int64_t(1) << 20), 256, 0, st, nin > 1 ? args3 : args2);
  };
}

KernelFactory expr_kernel(std::string expr) {
  return [expr](const KernelCtx& c) { return complex_map(c, expr); };
}

// cast to, from and between complex dtypes as the CPU's: complex -> real keeps the real part
// (then the real cast from float32, saturating for integers), complex -> bool is "either part
// nonzero", real -> complex is (x, 0).
LaunchFn complex_cast(const KernelCtx& c, const KernelFactory& real_cast) {
  const DType from = c.in[0].dtype, to = c.out[0].dtype;
  if (is_complex(from) && is_complex(to)) return complex_map(c, "x");
  if (!is_complex(from)) return complex_map(c, "mk((float)(x), 0.f)");
  if (to == DType::Bool) return complex_map(c, "(x.re != 0.f || x.im != 0.f)");
  if (to == DType::Float32) return complex_map(c, "x.re");
  // real part into scratch, then the real cast float32 -> `to`
  const TensorType part{DType::Float32, c.out[0].shape};
  std::vector<TensorType> part_out{part}, part_in{part};
  KernelCtx re{c.node, c.in, part_out};
  LaunchFn take = complex_map(re, "x.re");
  KernelCtx cv{c.node, part_in, c.out};
  LaunchFn conv = real_cast(cv);
  const size_t tmp = c.scratch(size_t(num_elements(part.shape)) * 4);
  return [take, conv, tmp](cudaStream_t st, const void* const* in, void* const* out) {
    void* t = out[tmp];
    take(st, in, &t);
    const void* ti = t;
    conv(st, &ti, out);
  };
}

}  // namespace

bool complex64_supported(const std::string& op) {
  static const std::unordered_set<std::string> ops = {
      // parts and by-parts
      "identity", "negative", "addition", "subtraction", "select", "sum_to_like", "broadcast_like", "cast",
      "multiplication", "division", "equal", "not_equal", "square", "exponent", "reciprocal", "absolute", "real_part",
      "imaginary_part", "angle", "conjugate", "complex",
      // FFT (fft_cuda.cpp)
      "fast_fourier_transform", "real_to_hermitean_fft", "hermitean_to_real_fft",
      // byte copies and fills (shape_cuda.cpp) and the program's own slots
      "placeholder", "constant", "read_variable", "assign_variable", "transpose", "swap_axes", "broadcast_to", "slice",
      "strided_slice", "slice_gradient", "reverse", "tile", "pad", "concat", "stack", "split", "split_like",
      "stop_gradient", "reshape", "reshape_like", "expand_dims", "squeeze", "flatten", "flatten_2d", "zeros", "ones",
      "full", "full_like"};
  return ops.count(op) > 0;
}

void register_complex_kernels() {
  for (const char* op : {"negative", "addition", "subtraction", "select", "sum_to_like"}) extend_by_parts(op);
  KernelFactory real_cast = registered_kernel("cast");
  extend("cast", [real_cast](const KernelCtx& c) { return complex_cast(c, real_cast); });
  const std::pair<const char*, const char*> exprs[] = {
      {"multiplication", "cmul(x, y)"}, {"division", "cdiv(x, y)"}, {"equal", "(x.re == y.re && x.im == y.im)"},
      {"not_equal", "(x.re != y.re || x.im != y.im)"}, {"square", "cmul(x, x)"}, {"exponent", "cexp(x)"},
      {"reciprocal", "cdiv(mk(1.f, 0.f), x)"}, {"absolute", "hypotf(x.re, x.im)"}};
  for (auto& [op, e] : exprs) extend(op, expr_kernel(e));
  const std::pair<const char*, const char*> ops[] = {
      {"real_part", "x.re"}, {"imaginary_part", "x.im"}, {"angle", "atan2f(x.im, x.re)"}, {"complex", "mk(x, y)"}};
  for (auto& [op, e] : ops) register_kernel(op, expr_kernel(e));
  register_kernel("conjugate", [](const KernelCtx& c) -> LaunchFn {
    if (any_complex(c)) return complex_map(c, "mk(x.re, -x.im)");
    return registered_kernel("identity")(c);  // real: a copy
  });
}

}  // namespace mg::cuda
