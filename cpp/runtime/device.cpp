#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"
#include "runtime/backend.h"

namespace mg {

namespace cpu { std::unique_ptr<Backend> make_cpu_backend(); }
// Each is defined by its backend, or by that backend's stub when it is not built.
std::unique_ptr<Backend> make_metal_backend();
std::unique_ptr<Backend> make_cuda_backend();

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
struct Backends {
  std::unique_ptr<Backend> cpu = cpu::make_cpu_backend();
  std::unique_ptr<Backend> metal = make_metal_backend();
  std::unique_ptr<Backend> cuda = make_cuda_backend();
};
Backends& backends() {
  static Backends b;
  return b;
}
}  // namespace

Backend& backend_for(const Device& d) {
  Backends& b = backends();
  Backend* be = d.kind == DeviceKind::CPU ? b.cpu.get() : d.kind == DeviceKind::Metal ? b.metal.get() : b.cuda.get();
  if (!be->available())
    raise(ErrorKind::Runtime, "device", "", "device '" + d.str() + "' is not available: " + be->unavailable_reason());
  if (d.index != 0) raise(ErrorKind::Runtime, "device", "", "device '" + d.str() + "' is not available: only index 0 is supported");
  return *be;
}

std::vector<Device> available_devices() {
  std::vector<Device> r;
  Backends& b = backends();
  if (b.metal->available()) r.push_back({DeviceKind::Metal, 0});
  if (b.cuda->available()) r.push_back({DeviceKind::CUDA, 0});
  r.push_back({DeviceKind::CPU, 0});
  return r;
}

Device default_device() { return available_devices().front(); }

}  // namespace mg
