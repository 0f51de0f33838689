// CUDA arange, eye and shape_of: their values depend only on attributes and the (static) result shape,
// so the factory computes them on the host exactly as the CPU does (store_from_double per
// element), uploads them once, and a run is one device-to-device copy.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "backends/cuda/cuda_internal.h"
#include "core/error.h"
#include "core/ops/creation_attrs.h"
#include "core/registry.h"
#include "core/typed_attrs.h"

namespace mg::cuda {

namespace {

LaunchFn upload_once(const std::vector<uint8_t>& bytes) {
  std::shared_ptr<Buffer> buf = device_alloc(bytes.size());
  copy_sync(buf->data, bytes.data(), bytes.size(), cudaMemcpyHostToDevice, "uploading a constant");
  const size_t n = bytes.size();
  return [buf, n](cudaStream_t s, const void* const*, void* const* out) {
    if (n) check(cudaMemcpyAsync(out[0], buf->data, n, cudaMemcpyDeviceToDevice, s), "copying a constant");
  };
}

LaunchFn arange_factory(const KernelCtx& c) {
  const auto& a = typed_attrs<ops::ArangeAttrs>(c.node);
  const DType t = c.out[0].dtype;
  const int64_t n = num_elements(c.out[0].shape);
  std::vector<uint8_t> v(size_t(n) * dtype_size(t));
  for (int64_t i = 0; i < n; ++i) store_from_double(v.data(), t, i, a.start + double(i) * a.step);
  return upload_once(v);
}

LaunchFn eye_factory(const KernelCtx& c) {
  const int64_t rows = c.out[0].shape[0], cols = c.out[0].shape[1];
  const int64_t k = typed_attrs<ops::EyeAttrs>(c.node).k;
  const DType t = c.out[0].dtype;
  std::vector<uint8_t> v(size_t(rows * cols) * dtype_size(t), 0);
  for (int64_t i = std::max<int64_t>(0, -k); i < rows && i + k < cols; ++i) store_from_double(v.data(), t, i * cols + i + k, 1.0);
  return upload_once(v);
}

// shape_of: the (static) input shape as int32, computed at compile time.
LaunchFn shape_of_factory(const KernelCtx& c) {
  std::vector<uint8_t> v(c.in[0].shape.size() * sizeof(int32_t));
  for (size_t i = 0; i < c.in[0].shape.size(); ++i) store_from_double(v.data(), DType::Int32, int64_t(i), double(c.in[0].shape[i]));
  return upload_once(v);
}

}  // namespace

void register_creation_kernels() {
  register_kernel("arange", arange_factory);
  register_kernel("eye", eye_factory);
  register_kernel("shape_of", shape_of_factory);
}

}  // namespace mg::cuda
