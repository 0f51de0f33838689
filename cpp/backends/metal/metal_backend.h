// The Metal backend as C++ sees it: opaque handles only. No Objective-C type appears here;
// the Objective-C++ side (metal_internal.h, *.mm) defines MetalDevice::Impl.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/array.h"
#include "core/graph.h"
#include "core/specialise.h"
#include "runtime/backend.h"

namespace mg::metal {

// One Metal GPU: id<MTLDevice> (MTLCreateSystemDefaultDevice), its MTLCommandQueue and the
// lock that serialises encoding on that queue. Shared by the backend and every program
// compiled for it.
class MetalDevice {
 public:
  struct Impl;  // Objective-C++ only
  static std::shared_ptr<MetalDevice> create();  // nullptr when there is no Metal device
  explicit MetalDevice(std::unique_ptr<Impl> impl);
  ~MetalDevice();
  MetalDevice(const MetalDevice&) = delete;
  MetalDevice& operator=(const MetalDevice&) = delete;

  Impl& impl() const { return *impl_; }
  std::string name() const;
  size_t page_size() const;  // getpagesize(): 16 KiB on Apple silicon

  // A host-visible Array backed by an MTLBuffer in shared storage. Buffer::data is the
  // buffer's contents; Buffer::owner keeps the MTLBuffer alive.
  std::shared_ptr<Array> allocate(DType dtype, const Shape& shape);

 private:
  std::unique_ptr<Impl> impl_;
};

// Runs a data-dependent node (non_zero_indices) between two stages of a run, as a small
// MPSGraph of its own whose result is sized at run time (metal_dynamic.mm).
std::vector<std::shared_ptr<Array>> run_data_dependent(MetalDevice& dev, const Node& node,
                                                       const std::vector<TensorType>& in_types,
                                                       const std::vector<std::shared_ptr<const Array>>& inputs);

// Lowers a specialised graph to one MPSGraph and compiles it to an MPSGraphExecutable.
std::unique_ptr<Program> compile_program(const std::shared_ptr<MetalDevice>& device, const Specialised& sg);

}  // namespace mg::metal
