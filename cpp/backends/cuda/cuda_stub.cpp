// Built where the CUDA toolkit is not: the CUDA device exists in the API and says why it is absent.
#include <memory>
#include <string>

#include "core/error.h"
#include "runtime/backend.h"

namespace mg {
namespace {
class CudaStub final : public Backend {
 public:
  DeviceKind kind() const override { return DeviceKind::CUDA; }
  bool available() const override { return false; }
  std::string unavailable_reason() const override {
    return "this build of mpsgraph has no CUDA backend (no CUDA toolkit was found at build time)";
  }
  std::unique_ptr<Program> compile(const Specialised&) override {
    raise(ErrorKind::Runtime, "device", "", "the CUDA backend is not built");
  }
};
std::unique_ptr<Backend> make_cuda_backend() { return std::make_unique<CudaStub>(); }
const RegisterBackend registered(DeviceKind::CUDA, make_cuda_backend);
}  // namespace
}  // namespace mg
