#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/registry.h"
#include "runtime/backend.h"

namespace mg {

static const char* kind_name(DeviceKind k) {
  switch (k) {
    case DeviceKind::CPU: return "cpu";
    case DeviceKind::Metal: return "metal";
    case DeviceKind::CUDA: return "cuda";
  }
  return "?";
}

std::string Device::str() const {
  return kind == DeviceKind::CPU ? "cpu" : std::string(kind_name(kind)) + ":" + std::to_string(index);
}

Device parse_device(const std::string& s) {
  std::string name = s, idx;
  auto colon = s.find(':');
  if (colon != std::string::npos) {
    name = s.substr(0, colon);
    idx = s.substr(colon + 1);
  }
  Device d;
  if (name == "cpu") d.kind = DeviceKind::CPU;
  else if (name == "metal" || name == "mps" || name == "gpu_metal") d.kind = DeviceKind::Metal;
  else if (name == "cuda" || name == "gpu") d.kind = DeviceKind::CUDA;
  else raise(ErrorKind::Value, "device", "", "unknown device '" + s + "'; known kinds are cpu, metal and cuda");
  if (!idx.empty()) {
    try {
      size_t used = 0;
      d.index = std::stoi(idx, &used);
      if (used != idx.size() || d.index < 0) throw std::invalid_argument(idx);
    } catch (const std::exception&) {
      raise(ErrorKind::Value, "device", "", "bad device index in '" + s + "'");
    }
  }
  if (d.kind == DeviceKind::CPU && d.index != 0) raise(ErrorKind::Value, "device", "", "there is only one cpu device, not '" + s + "'");
  return d;
}

namespace {
constexpr int kKinds = 3;
struct Backends {
  std::mutex mu;
  BackendFactory make[kKinds] = {};
  std::unique_ptr<Backend> made[kKinds];
};
Backends& backends() {
  static auto* b = new Backends();  // never destroyed: a run abandoned at exit may still use a backend
  return *b;
}
// The backend of a kind, made on first use; nullptr where none registered.
Backend* find_backend(DeviceKind kind) {
  Backends& b = backends();
  std::lock_guard<std::mutex> l(b.mu);
  const int k = int(kind);
  if (!b.made[k] && b.make[k]) b.made[k] = b.make[k]();
  return b.made[k].get();
}
}  // namespace

RegisterBackend::RegisterBackend(DeviceKind kind, BackendFactory make) {
  Backends& b = backends();
  std::lock_guard<std::mutex> l(b.mu);
  if (b.make[int(kind)]) throw std::logic_error(std::string("two backends registered for ") + kind_name(kind));
  b.make[int(kind)] = make;
}

Backend& backend_for(const Device& d) {
  Backend* be = find_backend(d.kind);
  if (!be) raise(ErrorKind::Runtime, "device", "", "device '" + d.str() + "' is not available: no backend of this kind is built");
  if (!be->available())
    raise(ErrorKind::Runtime, "device", "", "device '" + d.str() + "' is not available: " + be->unavailable_reason());
  if (d.index != 0) {
    std::string why = "device '" + d.str() + "' is not available: only index 0 is supported";
    if (d.kind == DeviceKind::CUDA)  // one context, stream, pool and library handles per process
      why += " (the cuda backend drives one GPU per process, the first visible one; to run on another, make it "
             "the first: CUDA_VISIBLE_DEVICES=" + std::to_string(d.index) + " makes GPU " + std::to_string(d.index) +
             " cuda:0)";
    raise(ErrorKind::Runtime, "device", "", why);
  }
  return *be;
}

std::vector<Device> available_devices() {
  std::vector<Device> r;
  for (DeviceKind k : {DeviceKind::Metal, DeviceKind::CUDA, DeviceKind::CPU}) {
    Backend* be = find_backend(k);
    if (be && be->available()) r.push_back({k, 0});
  }
  return r;
}

ConstantEvaluator& host_constant_evaluator() {
  ConstantEvaluator* e = backend_for({DeviceKind::CPU, 0}).constant_evaluator();
  if (!e) raise(ErrorKind::Runtime, "device", "", "the cpu backend has no constant evaluator");
  return *e;
}

Device default_device() { return available_devices().front(); }

}  // namespace mg

namespace mg {

std::vector<std::shared_ptr<Array>> Backend::run_data_dependent(const Node& node, const std::vector<TensorType>&,
                                                                const std::vector<std::shared_ptr<const Array>>&) {
  raise(ErrorKind::NotImplemented, node.op->name, node.name,
        "the " + std::string(kind_name(kind())) + " backend cannot run this data-dependent op");
}

}  // namespace mg
