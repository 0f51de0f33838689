// The Metal device (MTLDevice + MTLCommandQueue), MTLBuffer-backed Arrays, and the Backend
// that registers itself with the runtime (RegisterBackend).
#include <unistd.h>

#include <utility>

#include "backends/metal/metal_internal.h"

namespace mg::metal {

// Deleter of Buffer::owner for MTLBuffer-backed memory: releases the retained buffer.
// Its type also marks an Array as ours (std::get_deleter), so programs wrap it directly.
struct MTLBufferRelease {
  void operator()(void* p) const {
    @autoreleasepool {
      id<MTLBuffer> b = (__bridge_transfer id<MTLBuffer>)p;
      (void)b;  // ARC releases it here
    }
  }
};

id<MTLBuffer> buffer_of(const Array& a) {
  if (!a.buffer) return nil;
  if (!std::get_deleter<MTLBufferRelease>(a.buffer->owner)) return nil;
  id<MTLBuffer> b = (__bridge id<MTLBuffer>)a.buffer->owner.get();
  if (b.contents != a.buffer->data || b.length < a.nbytes()) return nil;  // a view into it, or too short
  return b;
}

MetalDevice::MetalDevice(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MetalDevice::~MetalDevice() {
  @autoreleasepool {
    impl_.reset();
  }
}

std::shared_ptr<MetalDevice> MetalDevice::create() {
  std::shared_ptr<MetalDevice> dev;
  @autoreleasepool {
    id<MTLDevice> d = MTLCreateSystemDefaultDevice();
    if (d == nil) return nullptr;
    id<MTLCommandQueue> q = [d newCommandQueue];
    if (q == nil) return nullptr;
    auto impl = std::make_unique<Impl>();
    impl->device = d;
    impl->queue = q;
    impl->graph_device = [MPSGraphDevice deviceWithMTLDevice:d];
    impl->page_size = size_t(getpagesize());
    impl->name = d.name ? std::string(d.name.UTF8String) : "Metal GPU";
    if (impl->graph_device == nil) return nullptr;
    dev = std::make_shared<MetalDevice>(std::move(impl));
  }
  return dev;
}

std::string MetalDevice::name() const { return impl_->name; }
size_t MetalDevice::page_size() const { return impl_->page_size; }

std::shared_ptr<Array> MetalDevice::allocate(DType dtype, const Shape& shape) {
  auto a = std::make_shared<Array>();
  a->dtype = dtype;
  a->shape = shape;
  const size_t nbytes = a->nbytes();
  if (nbytes == 0) {  // an MTLBuffer cannot be empty; nothing will ever be read or written
    a->buffer = Buffer::allocate(0);
    return a;
  }
  std::string error;
  guarded("allocate", [&] {
    id<MTLDevice> d = impl_->device;
    if (nbytes > d.maxBufferLength) {
      error = "cannot allocate " + std::to_string(nbytes) + " bytes: the device's maxBufferLength is " +
              std::to_string((unsigned long long)d.maxBufferLength);
      return;
    }
    id<MTLBuffer> b = [d newBufferWithLength:nbytes options:MTLResourceStorageModeShared];
    if (b == nil) {
      error = "out of device memory allocating " + std::to_string(nbytes) + " bytes";
      return;
    }
    void* contents = b.contents;
    std::shared_ptr<void> owner((__bridge_retained void*)b, MTLBufferRelease{});
    a->buffer = Buffer::borrow(contents, nbytes, std::move(owner));
  });
  if (!error.empty()) raise(ErrorKind::Runtime, "allocate", "", "metal: " + error);
  return a;
}

namespace {

class MetalBackend final : public Backend {
 public:
  MetalBackend() {
    try {
      device_ = MetalDevice::create();
    } catch (...) {
      device_ = nullptr;
    }
  }
  DeviceKind kind() const override { return DeviceKind::Metal; }
  bool available() const override { return device_ != nullptr; }
  std::string unavailable_reason() const override {
    return "no Metal device was found (MTLCreateSystemDefaultDevice returned nil)";
  }
  std::unique_ptr<Program> compile(const Specialised& sg) override {
    if (!device_) raise(ErrorKind::Runtime, "device", "", "metal: " + unavailable_reason());
    return compile_program(device_, sg);
  }
  std::shared_ptr<Array> allocate(DType dtype, const Shape& shape) override {
    if (!device_) return Array::empty(dtype, shape);
    return device_->allocate(dtype, shape);
  }
  // a composite with a lowering of its own (attention, the recurrent layers) goes to MPSGraph's op
  bool implements_composite(const Node& node) const override { return find_lowering(node.op->name) != nullptr; }
  std::vector<std::shared_ptr<Array>> run_data_dependent(const Node& node, const std::vector<TensorType>& in_types,
                                                         const std::vector<std::shared_ptr<const Array>>& inputs) override {
    if (!device_) raise(ErrorKind::Runtime, "device", "", "metal: " + unavailable_reason());
    return metal::run_data_dependent(*device_, node, in_types, inputs);
  }

 private:
  std::shared_ptr<MetalDevice> device_;
};

}  // namespace

}  // namespace mg::metal

namespace mg {
namespace {
std::unique_ptr<Backend> make_metal_backend() { return std::make_unique<metal::MetalBackend>(); }
const RegisterBackend registered(DeviceKind::Metal, make_metal_backend);
}  // namespace
}  // namespace mg
