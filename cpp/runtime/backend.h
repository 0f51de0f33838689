// Devices, backends and compiled programs. Backends depend on core and runtime only.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/array.h"
#include "core/graph.h"
#include "core/specialise.h"

namespace mg {

enum class DeviceKind { CPU = 0, Metal = 1, CUDA = 2 };

struct Device {
  DeviceKind kind = DeviceKind::CPU;
  int index = 0;
  std::string str() const;  // "cpu", "metal:0"
  bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
};
Device parse_device(const std::string& s);  // throws ValueError for unknown names

// One value of a compiled program and where it lives (Executable.memory_plan()).
struct PlanEntry {
  std::string node, op;
  std::string storage;     // feed, constant, variable, arena, output, scratch, view
  int64_t buffer = -1;     // arena buffer (arena, scratch, views of them), feed or output index
  size_t nbytes = 0;
  std::string alias_of;    // view: the node whose bytes it shares
  int64_t stage = 0;       // graphs with data-dependent nodes run in stages (runtime/executable.h)
};

// A compiled executable's backend half: every shape fixed, buffers planned.
class Program {
 public:
  virtual ~Program() = default;
  virtual std::vector<PlanEntry> memory_plan() const { return {}; }
  // inputs in feed order, outputs (already allocated, of the target types) in target order.
  virtual void run(const std::vector<std::shared_ptr<Array>>& inputs,
                   const std::vector<std::shared_ptr<Array>>& outputs) = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceKind kind() const = 0;
  virtual bool available() const = 0;         // built and a device present
  virtual std::string unavailable_reason() const { return ""; }
  virtual std::unique_ptr<Program> compile(const Specialised& sg) = 0;
  virtual std::shared_ptr<Array> allocate(DType dtype, const Shape& shape) { return Array::empty(dtype, shape); }
  // Arrays in device memory (what allocate() gives on a discrete GPU): copies to and from
  // host memory; an array already where it is asked for is returned as it is.
  virtual std::shared_ptr<Array> to_host(const std::shared_ptr<Array>& a) { return a; }
  virtual std::shared_ptr<Array> from_host(const std::shared_ptr<Array>& a) { return a; }
  // Stream interop for DLPack and __cuda_array_interface__, with streams named as those
  // protocols name them (1: CUDA's legacy default stream, 2: its per-thread default stream,
  // else a cudaStream_t). stream_handle() is the stream this device's runs are queued on (0
  // where there is none); order_before(s) makes stream s wait for the work queued so far on
  // it. The defaults do nothing: host memory is complete when a run returns.
  virtual uintptr_t stream_handle() { return 0; }
  virtual void order_before(uintptr_t consumer) { (void)consumer; }
  // The device's name for humans ("NVIDIA H200 (sm_90, 132 SMs)"); empty where none.
  virtual std::string describe() const { return ""; }
  // Composite nodes this backend runs as one kernel or lowering; the others are expanded
  // into their decompositions at specialisation.
  virtual bool implements_composite(const Node& node) const { return false; }
  // Evaluates nodes on host constants for specialisation (the CPU backend has one).
  virtual ConstantEvaluator* constant_evaluator() { return nullptr; }
  // Runs one data-dependent node (OpDef::data_dependent) between two stages of a run: its
  // inputs are concrete, and it allocates its outputs, whose shapes it is the one to know.
  // The default raises NotImplemented naming the op and this backend.
  virtual std::vector<std::shared_ptr<Array>> run_data_dependent(const Node& node, const std::vector<TensorType>& in_types,
                                                                 const std::vector<std::shared_ptr<const Array>>& inputs);
};

// Each backend, or its stub where it is not built, registers itself from its own
// translation unit: `static const RegisterBackend reg(DeviceKind::CPU, make_cpu_backend);`.
using BackendFactory = std::unique_ptr<Backend> (*)();
struct RegisterBackend {
  RegisterBackend(DeviceKind kind, BackendFactory make);
};

// Returns the backend for a device; throws a clear error naming the device when that
// backend was not built or has no device here.
Backend& backend_for(const Device& d);
std::vector<Device> available_devices();
Device default_device();

// The host's constant evaluator (the CPU backend's), used to specialise for every device.
ConstantEvaluator& host_constant_evaluator();

}  // namespace mg
