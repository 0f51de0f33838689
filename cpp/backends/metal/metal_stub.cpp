// Built where Metal is not: the Metal device exists in the API and says why it is absent.
#include <memory>
#include <string>

#include "core/error.h"
#include "runtime/backend.h"

namespace mg {
namespace {
class MetalStub final : public Backend {
 public:
  DeviceKind kind() const override { return DeviceKind::Metal; }
  bool available() const override { return false; }
  std::string unavailable_reason() const override {
    return "this build of mpsgraph has no Metal backend (it is built only on macOS with Apple's SDK)";
  }
  std::unique_ptr<Program> compile(const Specialised&) override {
    raise(ErrorKind::Runtime, "device", "", "the Metal backend is not built");
  }
};
std::unique_ptr<Backend> make_metal_backend() { return std::make_unique<MetalStub>(); }
const RegisterBackend registered(DeviceKind::Metal, make_metal_backend);
}  // namespace
}  // namespace mg
