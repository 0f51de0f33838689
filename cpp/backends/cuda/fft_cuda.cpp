// CUDA kernels for the FFT family (fast_fourier_transform, real_to_hermitean_fft,
// hermitean_to_real_fft) on cuFFT, opened with dlopen on first use (libcufft.so.12/.11;
// MPSGRAPH_CUFFT names the file) and declared here from its documentation. The plan is made at
// compile time; its work area comes from the memory plan (auto-allocation off) and the stream
// and work area are set at each launch, so the exec calls are captured in the CUDA graph.
// cuFFT transforms the innermost dims of a contiguous batch: other layouts are permuted into
// scratch first (transformed axes last) and back after, by a generated kernel that also widens
// real input, conjugates (the sign conventions cuFFT lacks) and applies the scaling.
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_internal.h"
#include "core/error.h"
#include "core/ops/fft_attrs.h"
#include "core/registry.h"
#include "core/typed_attrs.h"

namespace mg::cuda {

namespace {

using Handle = int;
using Result = int;
enum : int { kR2C = 0x2a, kC2R = 0x2c, kC2C = 0x29, kForward = -1, kInverse = 1 };

struct Fft {
  void* lib = nullptr;
  std::string error;
  Result (*create)(Handle*) = nullptr;
  Result (*destroy)(Handle) = nullptr;
  Result (*auto_alloc)(Handle, int) = nullptr;
  // (plan, rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch, workSize)
  Result (*make_plan)(Handle, int, long long*, long long*, long long, long long, long long*, long long, long long, int,
                      long long, size_t*) = nullptr;
  Result (*work_area)(Handle, void*) = nullptr;
  Result (*set_stream)(Handle, cudaStream_t) = nullptr;
  Result (*c2c)(Handle, void*, void*, int) = nullptr;
  Result (*r2c)(Handle, void*, void*) = nullptr;
  Result (*c2r)(Handle, void*, void*) = nullptr;
};

const Fft& cufft(const Node& n) {
  static Fft f = [] {
    Fft r;
    void* lib = open_cuda_library("MPSGRAPH_CUFFT", "libcufft.so");
    if (!lib) lib = dlopen("libcufft.so.11", RTLD_NOW | RTLD_LOCAL);
    const bool ok = lib && sym(lib, "cufftCreate", r.create) && sym(lib, "cufftDestroy", r.destroy) &&
                    sym(lib, "cufftSetAutoAllocation", r.auto_alloc) && sym(lib, "cufftMakePlanMany64", r.make_plan) &&
                    sym(lib, "cufftSetWorkArea", r.work_area) && sym(lib, "cufftSetStream", r.set_stream) &&
                    sym(lib, "cufftExecC2C", r.c2c) && sym(lib, "cufftExecR2C", r.r2c) && sym(lib, "cufftExecC2R", r.c2r);
    if (ok) r.lib = lib;
    else if (lib) r.error = "cuFFT could not be initialised (missing symbols)";
    else r.error = "cuFFT (libcufft.so) was not found; install cuFFT (pip: nvidia-cufft) or set MPSGRAPH_CUFFT to its path";
    return r;
  }();
  if (!f.lib) raise(ErrorKind::Runtime, n.op->name, n.name, f.error);
  return f;
}

// who: the op and node names, for the error
void fft_check(Result s, const std::pair<std::string, std::string>& who, const char* what) {
  if (s != 0) raise(ErrorKind::Runtime, who.first, who.second, std::string("cuFFT ") + what + " failed (status " + std::to_string(s) + ")");
}

struct Plan {
  const Fft* api = nullptr;
  Handle h = 0;
  bool made = false;
  ~Plan() {
    if (made) api->destroy(h);
  }
};

enum class Kind { C2C, R2C, C2R };

// dst[i] (contiguous over s.shape) = conversion of src[sum_d idx_d * s.stride[0][d]], times
// `scale`, conjugated when `conj`. src and dst are "cf" or "float"; widening float -> cf.
struct Restride {
  Kernel k;
  IndexSpace sp;
  float scale = 1;
};

Restride restride(const std::string& src_t, const std::string& dst_t, bool conj, const Shape& shape,
                  const std::vector<int64_t>& src_strides, float scale) {
  Restride r;
  r.scale = scale;
  r.sp.n = num_elements(shape);
  r.sp.rank = int32_t(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    r.sp.shape[d] = shape[d];
    r.sp.stride[0][d] = src_strides[d];
  }
  if (shape.empty()) {
    r.sp.rank = 1;
    r.sp.shape[0] = 1;
  }
  std::string value;
  if (dst_t == "float") value = "a[o] * scale";
  else if (src_t == "float") value = "mk(a[o] * scale, 0.f)";
  else value = std::string("mk(a[o].re * scale, ") + (conj ? "-" : "") + "a[o].im * scale)";
  const std::string src = prelude() +
                          "struct alignas(8) cf { float re, im; };\n"
                          "__device__ __forceinline__ cf mk(float a, float b) { cf r; r.re = a; r.im = b; return r; }\n"
                          "extern \"C\" __global__ void k(Space s, const " + src_t + "* a, " + dst_t + "* out, float scale) {\n"
                          "  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < s.n; i += (i64)gridDim.x * blockDim.x) {\n"
                          "    i64 rem = i, o = 0;\n"
                          "    for (int d = s.rank - 1; d >= 0; --d) {\n"
                          "      const i64 q = rem / s.shape[d];\n"
                          "      o += (rem - q * s.shape[d]) * s.stride[0][d];\n"
                          "      rem = q;\n    }\n"
                          "    out[i] = " + value + ";\n  }\n}\n";
  r.k = nvrtc_kernel(src, "k");
  return r;
}

void run_restride(const Restride& r, const void* src, void* dst, cudaStream_t st) {
  IndexSpace s = r.sp;
  float scale = r.scale;
  void* args[] = {&s, &src, &dst, &scale};
  launch(r.k, std::min<int64_t>((s.n + 255) / 256, int64_t(1) << 20), 256, 0, st, args);
}

LaunchFn make_fft(const KernelCtx& c, Kind kind) {
  const ops::FftAttrs& a = typed_attrs<ops::FftAttrs>(c.node);
  const TensorType &x = c.in[0], &y = c.out[0];
  if (num_elements(x.shape) == 0 || num_elements(y.shape) == 0)
    return [](cudaStream_t, const void* const*, void* const*) {};
  const size_t rank = x.shape.size();
  if (a.axes.size() > 3)
    raise(ErrorKind::NotImplemented, c.node.op->name, c.node.name,
          "transforms over more than 3 axes have no cuda kernel yet (cuFFT plans have rank 3 at most)");
  if (rank > size_t(kMaxRank))
    raise(ErrorKind::NotImplemented, c.node.op->name, c.node.name, "tensors of rank above 8 have no cuda kernel");
  // the permutation that puts the transformed axes last (axes are sorted: the halved one stays last)
  std::vector<int64_t> perm;
  std::vector<char> transformed(rank, 0);
  for (int64_t ax : a.axes) transformed[size_t(ax)] = 1;
  for (size_t d = 0; d < rank; ++d)
    if (!transformed[d]) perm.push_back(int64_t(d));
  for (int64_t ax : a.axes) perm.push_back(ax);
  bool identity = true;
  for (size_t d = 0; d < rank; ++d) identity = identity && perm[d] == int64_t(d);
  auto permuted = [&](const Shape& s) {
    Shape r;
    for (int64_t p : perm) r.push_back(s[size_t(p)]);
    return r;
  };
  const Shape px = permuted(x.shape), py = permuted(y.shape);
  const Shape& signal = kind == Kind::C2R ? y.shape : x.shape;
  std::vector<long long> n;
  double volume = 1;
  for (int64_t ax : a.axes) {
    n.push_back(static_cast<long long>(signal[size_t(ax)]));
    volume *= double(signal[size_t(ax)]);
  }
  long long batch = 1;
  for (size_t d = 0; d + a.axes.size() < rank; ++d) batch *= static_cast<long long>(px[d]);
  const double scale = a.scaling == ops::FftScaling::Size ? 1 / volume
                       : a.scaling == ops::FftScaling::Unitary ? 1 / std::sqrt(volume) : 1.0;
  const bool real_in = kind == Kind::C2C && !is_complex(x.dtype);
  // cuFFT's R2C is the '-' transform and C2R the '+' one: the other signs conjugate (x real)
  const bool conj_after = kind == Kind::R2C && a.inverse;
  const bool conj_before = kind == Kind::C2R && !a.inverse;
  const int direction = a.inverse ? kInverse : kForward;

  // input: permuted (and widened / conjugated) into scratch; C2R always copies, as cuFFT
  // overwrites its input there
  const bool prep = !identity || real_in || kind == Kind::C2R;
  std::shared_ptr<Restride> pre, post;
  size_t pre_idx = 0, out_idx = 0;
  const std::string in_t = is_complex(x.dtype) ? "cf" : "float";
  const std::string mid_t = kind == Kind::R2C ? "float" : "cf";  // what cuFFT reads
  const std::string out_t = is_complex(y.dtype) ? "cf" : "float";
  if (prep) {
    const std::vector<int64_t> st = contiguous_strides(x.shape);
    std::vector<int64_t> ps;
    for (int64_t p : perm) ps.push_back(st[size_t(p)]);
    pre = std::make_shared<Restride>(restride(in_t, mid_t, conj_before, px, ps, 1.f));
    pre_idx = c.scratch(size_t(num_elements(px)) * (mid_t == "cf" ? 8 : 4));
  }
  // output: cuFFT writes the permuted layout into scratch (or the result itself, in place
  // after for the scaling / conjugation)
  if (!identity || scale != 1.0 || conj_after) {
    std::vector<int64_t> st = contiguous_strides(py), back(rank);
    for (size_t k = 0; k < rank; ++k) back[size_t(perm[k])] = st[k];
    if (identity) back = contiguous_strides(y.shape);
    post = std::make_shared<Restride>(restride(out_t, out_t, conj_after, y.shape, back, float(scale)));
    if (!identity) out_idx = c.scratch(size_t(num_elements(py)) * dtype_size(y.dtype));
  }

  const std::pair<std::string, std::string> who{c.node.op->name, c.node.name};
  const Fft& api = cufft(c.node);
  auto plan = std::make_shared<Plan>();
  plan->api = &api;
  fft_check(api.create(&plan->h), who, "plan creation");
  plan->made = true;
  fft_check(api.auto_alloc(plan->h, 0), who, "cufftSetAutoAllocation");
  size_t ws = 0;
  const int type = kind == Kind::C2C ? kC2C : kind == Kind::R2C ? kR2C : kC2R;
  fft_check(api.make_plan(plan->h, int(n.size()), n.data(), nullptr, 1, 0, nullptr, 1, 0, type, batch, &ws), who,
            "plan (cufftMakePlanMany64)");
  const size_t ws_idx = ws ? c.scratch(ws) : 0;
  return [=](cudaStream_t st, const void* const* in, void* const* out) {
    const Fft& f = *plan->api;
    void* src = const_cast<void*>(in[0]);
    if (pre) {
      run_restride(*pre, src, out[pre_idx], st);
      src = out[pre_idx];
    }
    void* dst = identity ? out[0] : out[out_idx];
    fft_check(f.set_stream(plan->h, st), who, "cufftSetStream");
    if (ws) fft_check(f.work_area(plan->h, out[ws_idx]), who, "cufftSetWorkArea");
    if (kind == Kind::C2C) fft_check(f.c2c(plan->h, src, dst, direction), who, "cufftExecC2C");
    else if (kind == Kind::R2C) fft_check(f.r2c(plan->h, src, dst), who, "cufftExecR2C");
    else fft_check(f.c2r(plan->h, src, dst), who, "cufftExecC2R");
    if (post) run_restride(*post, dst, out[0], st);
  };
}

}  // namespace

void register_fft_kernels() {
  register_kernel("fast_fourier_transform", [](const KernelCtx& c) { return make_fft(c, Kind::C2C); });
  register_kernel("real_to_hermitean_fft", [](const KernelCtx& c) { return make_fft(c, Kind::R2C); });
  register_kernel("hermitean_to_real_fft", [](const KernelCtx& c) { return make_fft(c, Kind::C2R); });
}

}  // namespace mg::cuda
