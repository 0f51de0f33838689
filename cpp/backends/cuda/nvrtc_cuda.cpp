// NVRTC: generated kernels compiled for the GPU found, cached in memory and on disk.
//
// libnvrtc is opened with dlopen on first use (never linked), so a wheel built here imports
// and runs on the CPU where it is absent. Cache: $MPSGRAPH_CACHE_DIR, else
// $XDG_CACHE_HOME/mpsgraph, else ~/.cache/mpsgraph; one cubin per FNV-1a hash of (source,
// architecture, NVRTC version); a file that cannot be written is not an error.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_internal.h"
#include "core/error.h"

namespace mg::cuda {

namespace {

// The part of NVRTC's C API used here, declared from its documentation (no header needed).
using nvrtcResult = int;
using nvrtcProgram = struct _nvrtcProgram*;
struct Nvrtc {
  void* lib = nullptr;
  std::string error;
  nvrtcResult (*create)(nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*) = nullptr;
  nvrtcResult (*compile)(nvrtcProgram, int, const char* const*) = nullptr;
  nvrtcResult (*cubin_size)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*cubin)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*log_size)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*log)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*destroy)(nvrtcProgram*) = nullptr;
  nvrtcResult (*version)(int*, int*) = nullptr;
  const char* (*error_string)(nvrtcResult) = nullptr;
  int major = 0, minor = 0;
};

}  // namespace

void* open_cuda_library(const char* env, const std::string& stem) {
  std::vector<std::string> names;
  if (const char* p = std::getenv(env)) names.push_back(p);
  for (const char* v : {".13", ".12", ""}) names.push_back(stem + v);
  for (const char* root : std::vector<const char*>{std::getenv("CUDA_HOME"), std::getenv("CUDA_PATH"), "/usr/local/cuda"})
    if (root)
      for (const char* d : {"/lib64/", "/lib/"}) names.push_back(std::string(root) + d + stem);
  for (auto& nm : names)
    if (void* lib = dlopen(nm.c_str(), RTLD_NOW | RTLD_LOCAL)) return lib;
  return nullptr;
}

namespace {

const Nvrtc& nvrtc() {
  static Nvrtc n = [] {
    Nvrtc r;
    r.lib = open_cuda_library("MPSGRAPH_NVRTC", "libnvrtc.so");
    if (!r.lib) {
      r.error = "NVRTC (libnvrtc.so) was not found; install the CUDA toolkit's NVRTC or set MPSGRAPH_NVRTC to its path";
      return r;
    }
    bool ok = sym(r.lib, "nvrtcCreateProgram", r.create) && sym(r.lib, "nvrtcCompileProgram", r.compile) &&
              sym(r.lib, "nvrtcGetCUBINSize", r.cubin_size) && sym(r.lib, "nvrtcGetCUBIN", r.cubin) &&
              sym(r.lib, "nvrtcGetProgramLogSize", r.log_size) && sym(r.lib, "nvrtcGetProgramLog", r.log) &&
              sym(r.lib, "nvrtcDestroyProgram", r.destroy) && sym(r.lib, "nvrtcVersion", r.version) &&
              sym(r.lib, "nvrtcGetErrorString", r.error_string);
    if (!ok) {
      r.error = "libnvrtc lacks an entry point this backend needs";
      r.lib = nullptr;
      return r;
    }
    r.version(&r.major, &r.minor);
    return r;
  }();
  return n;
}

uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string cache_dir() {
  if (const char* d = std::getenv("MPSGRAPH_CACHE_DIR")) return std::string(d) + "/cuda";
  if (const char* x = std::getenv("XDG_CACHE_HOME")) return std::string(x) + "/mpsgraph/cuda";
  if (const char* h = std::getenv("HOME")) return std::string(h) + "/.cache/mpsgraph/cuda";
  return "";
}

// stdio, not fstreams (CONTRIBUTING.md: no iostreams in the core)
std::string read_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return "";
  std::string bytes;
  char buf[65536];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) bytes.append(buf, n);
  std::fclose(f);
  return bytes;
}

void write_file(const std::string& dir, const std::string& path, const std::string& bytes) {
  std::string mk = "mkdir -p '" + dir + "' 2>/dev/null";
  static std::once_flag made;
  std::call_once(made, [&] { (void)std::system(mk.c_str()); });
  const std::string tmp = path + ".tmp" + std::to_string(uintptr_t(&bytes));
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return;
  const bool whole = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  if (std::fclose(f) != 0 || !whole) {
    unlink(tmp.c_str());
    return;
  }
  std::rename(tmp.c_str(), path.c_str());  // atomic: concurrent processes never see half a file
}

std::string compile_cubin(const std::string& source, const std::string& arch, const std::vector<std::string>& options) {
  const Nvrtc& n = nvrtc();
  if (!n.lib) raise(ErrorKind::Runtime, "cuda", "", n.error);
  nvrtcProgram prog = nullptr;
  if (n.create(&prog, source.c_str(), "mpsgraph.cu", 0, nullptr, nullptr) != 0)
    raise(ErrorKind::Runtime, "cuda", "", "nvrtcCreateProgram failed");
  const std::string arch_opt = "--gpu-architecture=" + arch;
  std::vector<const char*> opts = {arch_opt.c_str(), "--std=c++17", "-default-device"};
  for (auto& o : options) opts.push_back(o.c_str());
  nvrtcResult rc = n.compile(prog, int(opts.size()), opts.data());
  size_t log_n = 0;
  n.log_size(prog, &log_n);
  std::string log(log_n, '\0');
  if (log_n) n.log(prog, log.data());
  if (rc != 0) {
    n.destroy(&prog);
    raise(ErrorKind::Runtime, "cuda", "", std::string("NVRTC could not compile a generated kernel (") + n.error_string(rc) +
                                              "):\n" + log + "\n--- source ---\n" + source);
  }
  size_t size = 0;
  n.cubin_size(prog, &size);
  std::string bin(size, '\0');
  n.cubin(prog, bin.data());
  n.destroy(&prog);
  return bin;
}

struct Loaded {
  cudaLibrary_t lib = nullptr;
  std::unordered_map<std::string, Kernel> kernels;
};

}  // namespace

Kernel nvrtc_kernel(const std::string& source, const std::string& name, const std::vector<std::string>& options) {
  static std::mutex mu;
  static std::unordered_map<std::string, Loaded> loaded;  // by source; kernels live as long as the process
  std::lock_guard<std::mutex> l(mu);
  std::string flags;
  for (auto& o : options) flags += o + "\n";
  Loaded& ld = loaded[flags + source];
  if (!ld.lib) {
    const Context& ctx = context();
    const std::string arch = "sm_" + std::to_string(ctx.sm_major) + std::to_string(ctx.sm_minor);
    const Nvrtc& n = nvrtc();
    if (!n.lib) raise(ErrorKind::Runtime, "cuda", "", n.error);
    // hex by hand: an ostringstream crashed here in processes that had not loaded PyTorch
    // (seen on the H200 machine, inside libstdc++'s locale code)
    uint64_t h = fnv1a(flags + source, fnv1a(arch + "/nvrtc" + std::to_string(n.major) + "." + std::to_string(n.minor)));
    std::string key(16, '0');
    for (int i = 15; i >= 0; --i, h >>= 4) key[size_t(i)] = "0123456789abcdef"[h & 15];
    const std::string dir = cache_dir();
    const std::string path = dir.empty() ? "" : dir + "/" + key + ".cubin";
    std::string bin = path.empty() ? "" : read_file(path);
    if (bin.empty() || cudaLibraryLoadData(&ld.lib, bin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0) != cudaSuccess) {
      cudaGetLastError();
      bin = compile_cubin(source, arch, options);
      check(cudaLibraryLoadData(&ld.lib, bin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0), "loading a generated kernel");
      if (!path.empty()) write_file(dir, path, bin);
    }
    // the source beside its cubin, to read what a profiler's kernel is
    static const bool keep_source = std::getenv("MPSGRAPH_NVRTC_SOURCES") && std::string(std::getenv("MPSGRAPH_NVRTC_SOURCES")) == "1";
    if (keep_source && !path.empty()) write_file(dir, dir + "/" + key + ".cu", "// " + flags + source);
  }
  auto it = ld.kernels.find(name);
  if (it != ld.kernels.end()) return it->second;
  cudaKernel_t k = nullptr;
  check(cudaLibraryGetKernel(&k, ld.lib, name.c_str()), "finding a generated kernel");
  Kernel r{reinterpret_cast<void*>(k)};
  ld.kernels.emplace(name, r);
  return r;
}

void launch(const Kernel& k, int64_t blocks, int threads, size_t smem, cudaStream_t s, void** args) {
  if (blocks <= 0) return;
  const unsigned g = unsigned(blocks < 2147483647 ? blocks : 2147483647);
  check(cudaLaunchKernel(k.fn, dim3(g), dim3(unsigned(threads)), args, smem, s), "launching a generated kernel");
}

}  // namespace mg::cuda
