// pybind11 bindings: thin wrappers over the C++ API. Op methods are generated in Python
// from op_schemas(); nothing here knows any particular op.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <shared_mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "backends/cpu/cpu_threads.h"
#include "backends/cpu/vec_math.h"
#include "bindings/dlpack.h"
#include "core/autodiff.h"
#include "core/control_flow.h"
#include "core/expand.h"
#include "core/graph.h"
#include "core/registry.h"
#include "runtime/executable.h"
#include "runtime/profile.h"
#include "runtime/tensor_data.h"
#ifdef MG_HAVE_CUDA
#include "backends/cuda/kernel_table.h"
#endif

namespace py = pybind11;
using namespace mg;

namespace {

PyObject* g_errors[5];  // by ErrorKind

// ---------- dtype <-> buffer format / DLPack ----------

const char* buffer_format(DType t) {
  switch (t) {
    case DType::Bool: return "?";
    case DType::Int8: return "b";
    case DType::Int16: return "h";
    case DType::Int32: return "i";
    case DType::Int64: return "q";
    case DType::UInt8: return "B";
    case DType::UInt16: return "H";
    case DType::UInt32: return "I";
    case DType::UInt64: return "Q";
    case DType::Float16: return "e";
    case DType::Float32: return "f";
    case DType::Float64: return "d";
    case DType::Complex64: return "Zf";
    case DType::Complex128: return "Zd";
    default: return nullptr;  // bfloat16 has no buffer-protocol code
  }
}

DLDataType dl_dtype(DType t) {
  uint8_t bits = uint8_t(dtype_size(t) * 8);
  if (is_bool(t)) return {kDLBool, 8, 1};
  if (t == DType::BFloat16) return {kDLBfloat, 16, 1};
  if (is_complex(t)) return {kDLComplex, bits, 1};
  if (is_floating(t)) return {kDLFloat, bits, 1};
  return {uint8_t(is_signed_integer(t) ? kDLInt : kDLUInt), bits, 1};
}

std::optional<DType> from_dl_dtype(DLDataType d) {
  if (d.lanes != 1) return std::nullopt;
  for (int i = 0; i < kNumDTypes; ++i) {
    DLDataType c = dl_dtype(DType(i));
    if (c.code == d.code && c.bits == d.bits) return DType(i);
  }
  return std::nullopt;
}

DType dtype_arg(const py::handle& h) {
  if (py::isinstance<py::str>(h)) {
    auto d = dtype_from_name(h.cast<std::string>());
    if (!d) throw GraphError(ErrorKind::Type, "[dtype] unknown dtype '" + h.cast<std::string>() + "'");
    return *d;
  }
  try {
    return h.cast<DType>();
  } catch (const py::cast_error&) {
    throw GraphError(ErrorKind::Type, "[dtype] expected a dtype (mg.float32, 'float32', ...), got " +
                                          py::repr(h).cast<std::string>());
  }
}

// ---------- wrapping host memory ----------

// Gathers a strided source (strides in bytes) into contiguous dst, element by element.
void strided_copy(const char* base, const Shape& shape, const std::vector<int64_t>& strides, size_t itemsize, char* dst) {
  int64_t n = num_elements(shape);
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t e = 0; e < n; ++e) {
    int64_t off = 0;
    for (size_t d = 0; d < shape.size(); ++d) off += idx[d] * strides[d];
    std::memcpy(dst + size_t(e) * itemsize, base + off, itemsize);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

bool is_contiguous(const Shape& shape, const std::vector<int64_t>& strides, int64_t itemsize) {
  int64_t expect = itemsize;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 0) return true;
    if (shape[i] != 1 && strides[i] != expect) return false;
    expect *= shape[i];
  }
  return true;
}

// What a buffer-protocol object holds. `for_output`: out= wants it written in place, so a
// buffer that would need a copy (non-contiguous, misaligned) or is read-only is refused.
TensorData from_buffer(py::buffer obj, bool for_output = false) {
  py::buffer_info info = obj.request();
  std::string fmt = info.format;
  if (!fmt.empty() && (fmt[0] == '<' || fmt[0] == '=' || fmt[0] == '@')) fmt = fmt.substr(1);
  std::optional<DType> dt;
  for (int i = 0; i < kNumDTypes; ++i) {
    const char* f = buffer_format(DType(i));
    if (f && fmt == f) dt = DType(i);
  }
  if (fmt == "l") dt = info.itemsize == 8 ? DType::Int64 : DType::Int32;
  if (fmt == "L") dt = info.itemsize == 8 ? DType::UInt64 : DType::UInt32;
  if (fmt == "c") dt = DType::Int8;
  if (!dt) throw GraphError(ErrorKind::Type, "[TensorData] unsupported buffer format '" + info.format + "'");
  if (size_t(info.itemsize) != dtype_size(*dt))
    throw GraphError(ErrorKind::Type, "[TensorData] buffer format '" + info.format + "' with item size " +
                                          std::to_string(info.itemsize) + " is not " + dtype_name(*dt));
  Shape shape(info.shape.begin(), info.shape.end());
  check_shape(shape, size_t(info.itemsize), false, "TensorData");
  int64_t n = num_elements(shape);
  std::vector<int64_t> strides(info.strides.begin(), info.strides.end());
  bool contiguous = is_contiguous(shape, strides, info.itemsize);
  bool aligned = reinterpret_cast<uintptr_t>(info.ptr) % size_t(info.itemsize) == 0;
  if (for_output) {
    const std::string what = "[run] out= buffer of type " + type_str({*dt, shape});
    if (info.readonly) throw GraphError(ErrorKind::Value, what + " is read-only");
    if (!contiguous) throw GraphError(ErrorKind::Value, what + " is not C-contiguous; results are written in place, "
                                                               "so pass a C-contiguous buffer");
    if (!aligned) throw GraphError(ErrorKind::Value, what + " is not aligned to its item size");
  }
  TensorData td;
  td.device = Device{};
  td.readonly = info.readonly;
  auto arr = std::make_shared<Array>();
  arr->dtype = *dt;
  arr->shape = shape;
  if (contiguous && aligned) {
    // borrow: the Python object stays alive as long as the buffer does
    auto* keep = new py::object(obj);
    auto owner = std::shared_ptr<void>(keep, [](void* p) {
      py::gil_scoped_acquire g;
      delete static_cast<py::object*>(p);
    });
    arr->buffer = Buffer::borrow(info.ptr, size_t(n) * size_t(info.itemsize), owner);
  } else {
    arr->buffer = Buffer::allocate(size_t(n) * size_t(info.itemsize));
    // gathered through the strides, visibly (td.copied); the copy is ours, so writable
    strided_copy(static_cast<const char*>(info.ptr), shape, strides, size_t(info.itemsize),
                 static_cast<char*>(arr->buffer->data));
    td.copied = true;
    td.readonly = false;
  }
  td.array = arr;
  return td;
}

// Frees a consumed DLPack tensor when the last Array using its memory goes.
template <class M>
std::shared_ptr<void> dlpack_owner(M* m) {
  return std::shared_ptr<void>(m, [](void* p) {
    auto* mt = static_cast<M*>(p);
    if (mt->deleter) {
      py::gil_scoped_acquire g;
      mt->deleter(mt);
    }
  });
}

[[noreturn]] void dlpack_fail(ErrorKind k, const std::string& msg) {
  throw GraphError(k, "[TensorData] __dlpack__ " + msg);
}

// A DLPack capsule: "dltensor" (unversioned) or "dltensor_versioned" (1.x; read-only flag
// respected). Contiguous tensors are used in place; strided ones are copied once (visible
// as TensorData.copied), as non-contiguous buffers are. Everything is checked before the
// capsule is marked used, so a refused capsule is still freed by its own destructor.
TensorData from_dlpack_capsule(py::handle capobj) {
  if (!PyCapsule_CheckExact(capobj.ptr()))
    dlpack_fail(ErrorKind::Type, "returned a '" + std::string(Py_TYPE(capobj.ptr())->tp_name) + "', not a DLPack capsule");
  const char* name = PyCapsule_GetName(capobj.ptr());
  if (!name) {
    PyErr_Clear();
    dlpack_fail(ErrorKind::Value, "returned a capsule without a name; expected 'dltensor' or 'dltensor_versioned'");
  }
  const bool versioned = std::strcmp(name, "dltensor_versioned") == 0;
  if (!versioned && std::strcmp(name, "dltensor") != 0)
    dlpack_fail(ErrorKind::Value, "returned a capsule named '" + std::string(name) +
                                      "'; expected 'dltensor' or 'dltensor_versioned' (a used capsule cannot be reused)");
  void* ptr = PyCapsule_GetPointer(capobj.ptr(), name);
  if (!ptr) {
    PyErr_Clear();
    dlpack_fail(ErrorKind::Value, "returned a capsule holding a NULL pointer");
  }
  DLTensor* t;
  bool readonly = false;
  if (versioned) {
    auto* m = static_cast<DLManagedTensorVersioned*>(ptr);
    if (m->version.major != 1)
      dlpack_fail(ErrorKind::Value, "returned a DLPack " + std::to_string(m->version.major) + "." +
                                        std::to_string(m->version.minor) + " tensor; version 1.x is supported");
    t = &m->dl_tensor;
    readonly = (m->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0;
  } else {
    t = &static_cast<DLManagedTensor*>(ptr)->dl_tensor;
  }
  const bool on_cuda = t->device.device_type == kDLCUDA;
  if (t->device.device_type != kDLCPU && t->device.device_type != kDLCUDAHost && !on_cuda)
    dlpack_fail(ErrorKind::Value, "gave a tensor on device type " + std::to_string(t->device.device_type) +
                                      ": mpsgraph takes cpu and cuda tensors");
  if (on_cuda) {  // only where the cuda backend runs: nothing else could read the memory
    try {
      backend_for(Device{DeviceKind::CUDA, t->device.device_id});
    } catch (const GraphError& e) {
      dlpack_fail(ErrorKind::Value, "gave a tensor on device type 2 (cuda:" + std::to_string(t->device.device_id) +
                                        "), which cannot be used here: " + e.what());
    }
  }
  auto dt = from_dl_dtype(t->dtype);
  if (!dt)
    dlpack_fail(ErrorKind::Type, "gave an unsupported dtype (code " + std::to_string(t->dtype.code) + ", bits " +
                                     std::to_string(t->dtype.bits) + ", lanes " + std::to_string(t->dtype.lanes) + ")");
  if (t->ndim < 0 || t->ndim > 64 || (t->ndim > 0 && !t->shape))
    dlpack_fail(ErrorKind::Value, "gave an invalid rank " + std::to_string(t->ndim) + (t->shape ? "" : " or no shape"));
  Shape shape(t->shape, t->shape + t->ndim);
  const size_t item = dtype_size(*dt);
  std::string why = shape_problem(shape, item, false);
  if (!why.empty()) dlpack_fail(ErrorKind::Value, "gave shape " + shape_str(shape) + ": " + why);
  const int64_t n = num_elements(shape);
  if (n > 0 && !t->data) dlpack_fail(ErrorKind::Value, "gave a NULL data pointer for " + shape_str(shape));
  std::vector<int64_t> strides(size_t(t->ndim));  // in bytes
  bool contiguous = true;
  if (t->strides) {
    for (size_t i = 0; i < strides.size(); ++i) {
      auto b = checked_mul(t->strides[i] < 0 ? -t->strides[i] : t->strides[i], int64_t(item));
      if (!b || t->strides[i] == std::numeric_limits<int64_t>::min())
        dlpack_fail(ErrorKind::Value, "gave stride " + std::to_string(t->strides[i]) + " out of range");
      strides[i] = t->strides[i] < 0 ? -*b : *b;
    }
    contiguous = is_contiguous(shape, strides, int64_t(item));
  }
  char* data = static_cast<char*>(t->data) + t->byte_offset;
  const bool aligned = reinterpret_cast<uintptr_t>(data) % item == 0;
  if (on_cuda && (!contiguous || !aligned))  // a host-side strided copy cannot read GPU memory
    dlpack_fail(ErrorKind::Value, "gave a non-contiguous or misaligned cuda tensor " + shape_str(shape) +
                                      "; make it contiguous first");
  PyCapsule_SetName(capobj.ptr(), versioned ? "used_dltensor_versioned" : "used_dltensor");
  std::shared_ptr<void> owner = versioned ? dlpack_owner(static_cast<DLManagedTensorVersioned*>(ptr))
                                          : dlpack_owner(static_cast<DLManagedTensor*>(ptr));
  auto arr = std::make_shared<Array>();
  arr->dtype = *dt;
  arr->shape = shape;
  TensorData td{arr, on_cuda ? Device{DeviceKind::CUDA, t->device.device_id} : Device{}, false, readonly};
  if (contiguous && aligned) {
    arr->buffer = Buffer::borrow(data, arr->nbytes(), owner);
  } else {
    arr->buffer = Buffer::allocate(arr->nbytes());
    if (n > 0) strided_copy(data, shape, strides, item, static_cast<char*>(arr->buffer->data));
    td.copied = true;
    td.readonly = false;
  }
  return td;
}

int dl_device_type(const Device& d) {
  return d.kind == DeviceKind::Metal ? kDLMetal : d.kind == DeviceKind::CUDA ? kDLCUDA : kDLCPU;
}

// The same data in host memory (a copy for device-resident data).
TensorData host_td(const TensorData& td) {
  if (td.device.kind != DeviceKind::CUDA) return td;
  return TensorData{backend_for(td.device).to_host(td.array), Device{}, true};
}

// Exports a TensorData: a versioned capsule when the consumer asks for DLPack >= 1
// (max_version), else the unversioned one. copy=True gives a fresh copy (flagged IS_COPIED);
// copy=False never copies (none is ever needed on the host). Read-only data cannot be told
// read-only through an unversioned capsule, so it is refused there (as numpy does).
template <class M>
struct DLExport {
  M managed{};
  std::shared_ptr<Array> keep;
  std::vector<int64_t> shape;
};

template <class M>
py::capsule make_dl_capsule(const TensorData& td, const std::shared_ptr<Array>& arr, const char* name) {
  auto* ex = new DLExport<M>();
  ex->keep = arr;
  ex->shape = arr->shape;
  DLTensor& t = ex->managed.dl_tensor;
  t.data = arr->data();
  t.device = {dl_device_type(td.device), td.device.index};
  t.ndim = int32_t(ex->shape.size());
  t.dtype = dl_dtype(arr->dtype);
  t.shape = ex->shape.data();
  t.strides = nullptr;
  t.byte_offset = 0;
  ex->managed.manager_ctx = ex;
  ex->managed.deleter = [](M* self) { delete static_cast<DLExport<M>*>(self->manager_ctx); };
  auto* mp = &ex->managed;
  // A capsule never consumed is freed by its destructor (its name is unchanged then).
  PyCapsule_Destructor destroy = [](PyObject* cap) {
    const char* nm = PyCapsule_GetName(cap);
    if (!nm) { PyErr_Clear(); return; }
    if (std::strcmp(nm, "dltensor") != 0 && std::strcmp(nm, "dltensor_versioned") != 0) return;
    auto* m = static_cast<M*>(PyCapsule_GetPointer(cap, nm));
    if (m && m->deleter) m->deleter(m);
    else PyErr_Clear();
  };
  PyObject* cap = PyCapsule_New(mp, name, destroy);
  if (!cap) {
    delete ex;
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(cap);
}

// The consumer's stream given to __dlpack__, as DLPack numbers CUDA streams: None and 1 the
// legacy default stream, 2 the per-thread default stream, a larger int a cudaStream_t, -1 no
// synchronisation; 0 is refused (ambiguous). Host memory takes None or -1 only.
int64_t dlpack_stream(const TensorData& td, const py::object& stream) {
  auto given = [&] { return py::repr(stream).cast<std::string>(); };
  if (!stream.is_none() && (py::isinstance<py::bool_>(stream) || !py::isinstance<py::int_>(stream)))
    throw GraphError(ErrorKind::Type, "[TensorData] __dlpack__: stream must be an int or None, got " + given());
  int overflow = 0;
  const long long s = stream.is_none() ? 1 : PyLong_AsLongLongAndOverflow(stream.ptr(), &overflow);
  if (td.device.kind != DeviceKind::CUDA) {
    if (!stream.is_none() && s != -1)
      throw py::buffer_error("[TensorData] __dlpack__: stream must be None or -1 for data on " + td.device.str() +
                             ", got " + given());
    return -1;
  }
  if (overflow || s < -1 || s == 0)
    throw py::buffer_error("[TensorData] __dlpack__: stream " + given() + " is not a CUDA stream for data on " +
                           td.device.str() + " (DLPack: None or 1 the legacy default stream, 2 the per-thread one, "
                           "a cudaStream_t, or -1 for no synchronisation; 0 is ambiguous)");
  return s;
}

py::capsule to_dlpack(const TensorData& td, py::object stream, py::object max_version, py::object dl_device,
                      py::object copy) {
  const int dev_type = dl_device_type(td.device);
  const int64_t consumer = dlpack_stream(td, stream);
  int major = 0;
  if (!max_version.is_none()) {
    py::sequence mv = py::reinterpret_borrow<py::sequence>(max_version);
    if (py::len(mv) != 2) throw GraphError(ErrorKind::Value, "[TensorData] __dlpack__: max_version must be (major, minor)");
    major = mv[0].cast<int>();
  }
  bool want_copy = false;
  if (!copy.is_none()) want_copy = copy.cast<bool>();
  if (!dl_device.is_none()) {
    py::sequence d = py::reinterpret_borrow<py::sequence>(dl_device);
    if (py::len(d) != 2 || d[0].cast<int>() != dev_type || d[1].cast<int>() != td.device.index)
      throw py::buffer_error("[TensorData] __dlpack__: cannot export to device " + py::repr(dl_device).cast<std::string>() +
                             "; the data lives on (" + std::to_string(dev_type) + ", " + std::to_string(td.device.index) + ")");
  }
  std::shared_ptr<Array> arr = td.array;
  if (want_copy && td.device.kind == DeviceKind::CUDA) {
    throw py::buffer_error("[TensorData] __dlpack__: copy=True is not offered for cuda data; use .to(device) for a copy");
  } else if (want_copy) {
    arr = Array::empty(td.array->dtype, td.array->shape);
    if (arr->nbytes()) std::memcpy(arr->data(), td.array->data(), arr->nbytes());
  }
  if (td.device.kind == DeviceKind::CUDA && consumer != -1)
    backend_for(td.device).order_before(uintptr_t(consumer));
  if (major >= 1) {
    py::capsule cap = make_dl_capsule<DLManagedTensorVersioned>(td, arr, "dltensor_versioned");
    auto* m = static_cast<DLManagedTensorVersioned*>(cap.get_pointer<void>());
    m->version = {1, 0};
    m->flags = (td.readonly && !want_copy ? DLPACK_FLAG_BITMASK_READ_ONLY : 0) | (want_copy ? DLPACK_FLAG_BITMASK_IS_COPIED : 0);
    return cap;
  }
  if (td.readonly && !want_copy)
    throw py::buffer_error("[TensorData] __dlpack__: cannot export read-only data through an unversioned DLPack "
                           "capsule (it has no read-only flag); ask for max_version=(1, 0) or copy=True");
  return make_dl_capsule<DLManagedTensor>(td, arr, "dltensor");
}

// The CUDA device index of a DLPack object on a CUDA GPU (by __dlpack_device__), else none.
std::optional<int> dlpack_cuda_index(py::handle h) {
  if (!py::hasattr(h, "__dlpack__") || !py::hasattr(h, "__dlpack_device__")) return std::nullopt;
  py::object dev = h.attr("__dlpack_device__")();
  if (!py::isinstance<py::tuple>(dev) || py::len(dev) != 2 || dev.cast<py::tuple>()[0].cast<int>() != kDLCUDA)
    return std::nullopt;
  return dev.cast<py::tuple>()[1].cast<int>();
}

// Calls obj.__dlpack__, asking for a versioned capsule; producers that predate DLPack 1.0
// (no max_version keyword) are asked again without it.
// A CUDA producer is given the stream the cuda backend runs on, and orders its pending work
// before it (DLPack's stream semantics): a run that reads the tensor comes after the work
// that wrote it, without the host waiting.
py::object call_dlpack(py::handle h) {
  py::object fn = h.attr("__dlpack__");
  const std::optional<int> cuda_index = dlpack_cuda_index(h);
  if (cuda_index) {
    uintptr_t ours = 0;
    try {
      ours = backend_for(Device{DeviceKind::CUDA, *cuda_index}).stream_handle();
    } catch (const GraphError& e) {
      dlpack_fail(ErrorKind::Value, "object is on device type 2 (cuda:" + std::to_string(*cuda_index) +
                                        "), which cannot be used here: " + e.what());
    }
    py::int_ stream(ours);
    try {
      return fn(py::arg("stream") = stream, py::arg("max_version") = py::make_tuple(1, 0));
    } catch (py::error_already_set& e) {
      if (!e.matches(PyExc_TypeError)) throw;
    }
    return fn(py::arg("stream") = stream);
  }
  try {
    return fn(py::arg("max_version") = py::make_tuple(1, 0));
  } catch (py::error_already_set& e) {
    if (!e.matches(PyExc_TypeError)) throw;
  }
  return fn();
}

TensorData to_tensor_data(py::handle h, bool for_output = false) {
  if (py::isinstance<TensorData>(h)) {
    TensorData td = h.cast<TensorData>();
    if (for_output && td.readonly)
      throw GraphError(ErrorKind::Value, "[run] out= TensorData of type " + type_str({td.array->dtype, td.array->shape}) +
                                             " wraps read-only memory");
    return td;
  }
  // CuPy and JAX arrays offer the buffer protocol too, and refuse it for GPU memory
  if (PyObject_CheckBuffer(h.ptr())) {
    bool on_cuda = false;
    try {
      on_cuda = !py::isinstance<py::array>(h) && dlpack_cuda_index(h);
    } catch (py::error_already_set&) {  // a broken __dlpack_device__: the buffer it offers decides
    }
    if (!on_cuda) return from_buffer(py::reinterpret_borrow<py::buffer>(h), for_output);
  }
  if (py::hasattr(h, "__dlpack__")) {
    py::object cap;
    try {
      cap = call_dlpack(h);
    } catch (py::error_already_set& e) {
      throw GraphError(ErrorKind::Value, "[TensorData] " + std::string(Py_TYPE(h.ptr())->tp_name) +
                                             ".__dlpack__() raised " + e.what());
    }
    TensorData td = from_dlpack_capsule(cap);
    if (for_output && td.copied)
      throw GraphError(ErrorKind::Value, "[run] out= DLPack tensor of type " + type_str({td.array->dtype, td.array->shape}) +
                                             " is not C-contiguous and aligned; results are written in place");
    if (for_output && td.readonly)
      throw GraphError(ErrorKind::Value, "[run] out= DLPack tensor of type " + type_str({td.array->dtype, td.array->shape}) +
                                             " is read-only");
    return td;
  }
  throw GraphError(ErrorKind::Type, std::string(for_output ? "[run] out= items" : "[TensorData] cannot use an object") +
                                        " of type '" + std::string(Py_TYPE(h.ptr())->tp_name) +
                                        "' as tensor data: pass a numpy array, a buffer, a DLPack tensor or TensorData");
}

// Arrays for a run on `device`: data on another device is copied (GPU data to the host for
// a cpu run; host data goes to the GPU inside the cuda backend's run, through staging).
std::vector<std::shared_ptr<Array>> arrays_of(const std::vector<py::handle>& hs, const Device& device,
                                              bool for_output = false) {
  std::vector<std::shared_ptr<Array>> r;
  for (auto& h : hs) {
    TensorData td = to_tensor_data(h, for_output);
    if (td.device.kind == DeviceKind::CUDA && !(device == td.device)) td = host_td(td);
    r.push_back(td.array);
  }
  return r;
}

py::tuple shape_tuple(const Shape& s) {
  py::tuple t(s.size());
  for (size_t i = 0; i < s.size(); ++i) t[i] = s[i] < 0 ? py::object(py::none()) : py::object(py::int_(s[i]));
  return t;
}

// A shape from Python: a sequence of ints (None for an unknown dim). Non-integers and ints
// beyond int64 are refused by name, not as pybind11 cast errors.
Shape shape_arg(const py::handle& h, const char* op = "shape") {
  if (!py::isinstance<py::sequence>(h) || py::isinstance<py::str>(h))
    throw GraphError(ErrorKind::Type, std::string("[") + op + "] a shape must be a sequence of ints or None, got " +
                                          py::repr(h).cast<std::string>());
  Shape s;
  for (auto d : h) {
    if (d.is_none()) {
      s.push_back(kUnknownDim);
      continue;
    }
    if (py::isinstance<py::bool_>(d) || !PyIndex_Check(d.ptr()))
      throw GraphError(ErrorKind::Type, std::string("[") + op + "] dims must be ints or None, got " +
                                            py::repr(d).cast<std::string>() + " in " + py::repr(h).cast<std::string>());
    int overflow = 0;
    py::object i = py::reinterpret_steal<py::object>(PyNumber_Index(d.ptr()));
    if (!i) throw py::error_already_set();
    long long v = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
    if (overflow)
      throw GraphError(ErrorKind::Value, std::string("[") + op + "] dim " + py::repr(d).cast<std::string>() +
                                             " is out of range in " + py::repr(h).cast<std::string>());
    s.push_back(int64_t(v));
  }
  return s;
}

TensorType type_arg(const py::handle& h) {
  py::sequence seq = py::reinterpret_borrow<py::sequence>(h);
  if (py::len(seq) != 2) throw GraphError(ErrorKind::Type, "[compile] a feed type is (shape, dtype), got " + py::repr(h).cast<std::string>());
  return {dtype_arg(seq[1]), shape_arg(seq[0], "compile")};
}

AttrValue attr_from_py(const py::handle& v, AttrKind kind, const std::string& op) {
  switch (kind) {
    case AttrKind::Int: return v.cast<int64_t>();
    case AttrKind::Float: return v.cast<double>();
    case AttrKind::Bool: return v.cast<bool>();
    case AttrKind::String: return v.cast<std::string>();
    case AttrKind::Ints: case AttrKind::Axes: return v.cast<std::vector<int64_t>>();
    case AttrKind::Shape: return shape_arg(v, op.c_str());
    case AttrKind::Floats: return v.cast<std::vector<double>>();
    case AttrKind::DType: return dtype_arg(v);
    case AttrKind::Tensor: return std::shared_ptr<const Array>(host_td(to_tensor_data(v)).array);
  }
  return AttrNone{};
}

py::object attr_to_py(const AttrValue& a) {
  return std::visit(
      [](auto&& v) -> py::object {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, AttrNone>) return py::none();
        else if constexpr (std::is_same_v<T, std::shared_ptr<const Array>>)
          return py::cast(TensorData{std::const_pointer_cast<Array>(v), Device{}, false});
        else return py::cast(v);
      },
      a);
}

// The Python-facing graph: the IR plus the run cache of its executables.
struct PyGraph {
  std::shared_ptr<Graph> graph = std::make_shared<Graph>();
  ExecutableCache cache;
};

// ---------- releasing the GIL, safely at interpreter exit ----------

// Set by an atexit hook: from then on the interpreter may finalize under a thread that is
// inside a run without the GIL.
std::atomic<bool> g_exiting{false};
unsigned long g_main_thread = 0;  // the interpreter's main thread: it does the finalizing, never waits

bool interpreter_exiting() {
#if PY_VERSION_HEX >= 0x030D0000
  return g_exiting.load() || Py_IsFinalizing();
#else
  return g_exiting.load() || _Py_IsFinalizing();
#endif
}

// Takes the GIL back after work done without it. A thread that comes back while the
// interpreter finalizes would be ended inside PyEval_RestoreThread (pthread_exit, whose
// unwinding through pybind11's noexcept destructors aborts the process): it waits here
// instead, and the process exits around it.
void take_gil_back(PyThreadState* st) {
  while (PyThread_get_thread_ident() != g_main_thread && interpreter_exiting())
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  PyEval_RestoreThread(st);
}

// run_async's handle on one queued GPU run (the Python side completes its future): holds the
// inputs, out buffers and results until it is dropped.
struct QueuedRun {
  std::shared_ptr<Executable> exe;
  std::vector<std::shared_ptr<Array>> inputs, given, outs;
  StartedRun run;
  std::atomic<bool> waited{false};  // result() has waited (run is never changed: other threads query it)
  // a run with no finished query counts as finished: result() then blocks until it is
  bool finished(bool block) const { return waited || !run.wait || !run.finished || run.finished(block); }
};

// Runs f without the GIL (a plain function, not a RAII guard, so that the GIL is never
// taken back from a destructor).
template <class F>
auto without_gil(F&& f) -> decltype(f()) {
  PyThreadState* st = PyEval_SaveThread();
  try {
    if constexpr (std::is_void_v<decltype(f())>) {
      f();
      take_gil_back(st);
    } else {
      auto r = f();
      take_gil_back(st);
      return r;
    }
  } catch (...) {
    take_gil_back(st);
    throw;
  }
}

// Exclusive use of the graph for a mutation while other threads may compile or run it
// (they hold build_mutex shared, without the GIL): wait for them without the GIL.
std::unique_lock<std::shared_mutex> building(PyGraph& g) {
  std::unique_lock<std::shared_mutex> l(g.graph->build_mutex(), std::try_to_lock);
  if (!l.owns_lock()) without_gil([&] { l.lock(); });
  return l;
}

py::list wrap_outputs(const std::vector<std::shared_ptr<Array>>& outs, const Device& d) {
  py::list r;
  for (auto& a : outs) r.append(py::cast(TensorData{a, d, false}));
  return r;
}

std::vector<ValueRef> refs_arg(const std::vector<std::pair<int32_t, int32_t>>& v) {
  std::vector<ValueRef> r;
  for (auto& p : v) r.push_back({p.first, p.second});
  return r;
}

using RegionHandle = std::shared_ptr<Region>;

py::dict schema_dict(const OpDef& op) {
  py::dict d;
  d["name"] = op.name;
  d["doc"] = op.doc;
  d["family"] = op.family;
  d["python_method"] = op.python_method;
  d["aliases"] = op.aliases;
  d["differentiable"] = op.differentiable == Differentiable::Yes   ? "yes"
                        : op.differentiable == Differentiable::No ? "no"
                                                                  : "unset";
  d["stateful"] = op.stateful;
  d["multi_output"] = op.multi_output;
  py::list ins;
  for (auto& i : op.inputs) ins.append(py::make_tuple(i.name, i.variadic, i.optional));
  d["inputs"] = ins;
  py::list roles;  // per input: data, shape_only, index or predicate
  for (auto& i : op.inputs) roles.append(input_role_name(i.role));
  d["input_roles"] = roles;
  d["composite"] = op.composite();
  py::list attrs;
  for (auto& a : op.attrs) {
    py::dict ad;
    ad["name"] = a.name;
    ad["kind"] = attr_kind_name(a.kind);
    ad["required"] = std::holds_alternative<AttrNone>(a.default_value) && !a.optional;
    ad["default"] = attr_to_py(a.default_value);
    ad["doc"] = a.doc;
    attrs.append(ad);
  }
  d["attrs"] = attrs;
  return d;
}

// ---------- graph inspection (pictures, printing) ----------

py::object ref_py(ValueRef v) { return v.valid() ? py::object(py::make_tuple(v.node, v.index)) : py::object(py::none()); }

py::list refs_py(const std::vector<ValueRef>& vs) {
  py::list r;
  for (auto& v : vs) r.append(ref_py(v));
  return r;
}

py::list types_py(const std::vector<TensorType>& ts) {
  py::list r;
  for (auto& t : ts) r.append(py::make_tuple(shape_tuple(t.shape), t.dtype));
  return r;
}

py::dict attrs_py(const Attrs& attrs) {
  py::dict d;
  for (auto& kv : attrs) d[py::str(kv.first)] = attr_to_py(kv.second);
  return d;
}

// One node: inputs in schema order (None where an optional one is absent), outputs as
// (shape, dtype), and the graph-level op it implements (itself unless made by a composite).
py::dict node_py(const Node& n) {
  py::dict d;
  d["id"] = n.id;
  d["op"] = n.op->name;
  d["name"] = n.name;
  d["inputs"] = refs_py(schema_inputs(n));
  d["outputs"] = types_py(n.outputs);
  d["attrs"] = attrs_py(n.attrs);
  d["composite"] = n.op->composite();
  d["data_dependent"] = n.op->is_data_dependent(n);
  d["origin"] = py::make_tuple(n.origin_op ? n.origin_op->name : n.op->name, n.origin_name);
  return d;
}

py::list nodes_py(const Graph& g) {
  py::list r;
  for (size_t i = 0; i < g.size(); ++i) r.append(node_py(g.node(int32_t(i))));
  return r;
}

py::dict expansion_py(const Expansion& e) {
  py::dict d;
  d["nodes"] = nodes_py(*e.graph);
  py::list groups;
  for (auto& gr : e.groups) {
    py::dict x;
    x["op"] = gr.op->name;
    x["name"] = gr.name;
    x["attrs"] = attrs_py(gr.attrs);
    x["inputs"] = refs_py(gr.inputs);
    x["outputs"] = types_py(gr.types);
    x["results"] = refs_py(gr.outputs);
    x["first"] = gr.first;
    x["end"] = gr.end;
    x["parent"] = gr.parent;
    x["source"] = gr.source;
    groups.append(x);
  }
  d["groups"] = groups;
  py::list sources;
  for (size_t i = 0; i < e.outputs.size(); ++i) sources.append(py::make_tuple(refs_py(e.outputs[i]), e.first[i], e.end[i]));
  d["sources"] = sources;
  d["kept"] = e.kept;
  return d;
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "mpsgraph native core: graph IR, op registry, backends";
  // atexit hooks run after non-daemon threads are joined and before finalization starts
  py::module_::import("atexit").attr("register")(py::cpp_function([] { g_exiting.store(true); }));
  g_main_thread = py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();

  py::object base = py::module_::import("builtins").attr("Exception");
  PyObject* graph_error = PyErr_NewException("mpsgraph.GraphError", nullptr, nullptr);
  m.attr("GraphError") = py::handle(graph_error);
  auto sub = [&](const char* name, PyObject* std_base) {
    py::tuple bases = py::make_tuple(py::handle(graph_error), py::handle(std_base));
    PyObject* e = PyErr_NewException(name, bases.ptr(), nullptr);
    return e;
  };
  g_errors[int(ErrorKind::Value)] = sub("mpsgraph.GraphValueError", PyExc_ValueError);
  g_errors[int(ErrorKind::Type)] = sub("mpsgraph.GraphTypeError", PyExc_TypeError);
  g_errors[int(ErrorKind::Index)] = sub("mpsgraph.GraphIndexError", PyExc_IndexError);
  g_errors[int(ErrorKind::Runtime)] = sub("mpsgraph.GraphRuntimeError", PyExc_RuntimeError);
  g_errors[int(ErrorKind::NotImplemented)] = sub("mpsgraph.GraphNotImplementedError", PyExc_NotImplementedError);
  m.attr("GraphValueError") = py::handle(g_errors[0]);
  m.attr("GraphTypeError") = py::handle(g_errors[1]);
  m.attr("GraphIndexError") = py::handle(g_errors[2]);
  m.attr("GraphRuntimeError") = py::handle(g_errors[3]);
  m.attr("GraphNotImplementedError") = py::handle(g_errors[4]);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const GraphError& e) {
      PyErr_SetString(g_errors[int(e.kind)], e.what());
    } catch (const std::bad_alloc&) {
      PyErr_SetString(PyExc_MemoryError, "mpsgraph: out of memory");
    }
  });

  py::enum_<DType>(m, "DType")
      .value("bool", DType::Bool).value("int8", DType::Int8).value("int16", DType::Int16)
      .value("int32", DType::Int32).value("int64", DType::Int64).value("uint8", DType::UInt8)
      .value("uint16", DType::UInt16).value("uint32", DType::UInt32).value("uint64", DType::UInt64)
      .value("float16", DType::Float16).value("bfloat16", DType::BFloat16).value("float32", DType::Float32)
      .value("float64", DType::Float64).value("complex64", DType::Complex64)
      .value("complex128", DType::Complex128);
  m.def("dtype_size", &dtype_size);
  m.def("set_num_threads", &cpu::set_num_threads, py::arg("n"),
        "Caps the threads the CPU backend (its kernels and BLAS) uses; n <= 0 restores the default "
        "(every hardware thread).");
  m.def("get_num_threads", [] { return cpu::num_threads(); }, "Threads the CPU backend uses.");
  m.def("_set_cpu_composite_kernels", &cpu::set_composite_kernels, py::arg("on"),
        "Testing: off runs every composite on the CPU as its decomposition (graphs compiled after the call).");
  m.def("_cpu_isa", [] { return std::string(cpu::vmath::isa()); }, "The ISA the CPU's vectorised math runs on.");
  m.def("_cpu_pool_step_overhead_us", &cpu::pool_step_overhead_us, py::arg("work_us") = 25.0,
        py::arg("batches") = 20000, py::call_guard<py::gil_scoped_release>(),
        "Benchmarking: the median time a parallel step of one busy task a thread takes past work_us.");

  py::class_<TensorData>(m, "TensorData", py::buffer_protocol())
      .def(py::init([](py::object obj) { return to_tensor_data(obj); }), py::arg("data"),
           "Wraps a contiguous host array (numpy, buffer protocol, DLPack) without copying.")
      .def_static("empty", [](py::object shape, py::object dtype) {
            return TensorData{Array::empty(dtype_arg(dtype), shape_arg(shape, "TensorData")), Device{}, false};
          }, py::arg("shape"), py::arg("dtype"))
      .def_property_readonly("shape", [](const TensorData& t) { return shape_tuple(t.array->shape); })
      .def_property_readonly("dtype", [](const TensorData& t) { return t.array->dtype; })
      .def_property_readonly("device", [](const TensorData& t) { return t.device.str(); })
      .def_property_readonly("nbytes", [](const TensorData& t) { return t.array->nbytes(); })
      .def_property_readonly("readonly", [](const TensorData& t) { return t.readonly; },
                             "True when it wraps memory its producer marked read-only (immutable bytes, a "
                             "read-only array or DLPack tensor): it is never written and cannot be an out= buffer.")
      .def_property_readonly("copied", [](const TensorData& t) { return t.copied; },
                             "True when making this TensorData needed a copy (a non-contiguous source).")
      .def_property_readonly("data_ptr", [](const TensorData& t) { return reinterpret_cast<uintptr_t>(t.array->data()); })
      .def("_reinterpret", [](const TensorData& t, DType d) {
            if (dtype_size(d) != dtype_size(t.array->dtype)) throw GraphError(ErrorKind::Value, "[TensorData] reinterpret needs equal sizes");
            auto a = std::make_shared<Array>(*t.array);
            a->dtype = d;
            return TensorData{a, t.device, t.copied, t.readonly};
          })
      .def("_raw", [](py::object self) {
            // a uint8 view of the bytes, for dtypes without a buffer code (bfloat16); its base is
            // the TensorData itself: a memoryview kept alive by keep_alive was not enough, since
            // numpy holds another memoryview of the same buffer and the first one dies
            const TensorData& t = self.cast<const TensorData&>();
            py::array view(py::dtype("uint8"), {py::ssize_t(t.array->nbytes())}, {py::ssize_t(1)},
                           t.array->data(), self);
            if (t.readonly) view.attr("flags").attr("writeable") = false;
            return view;
          })
      .def("__dlpack__", [](const TensorData& t, py::object stream, py::object max_version, py::object dl_device,
                            py::object copy) { return to_dlpack(t, stream, max_version, dl_device, copy); },
           py::arg("stream") = py::none(), py::arg("max_version") = py::none(), py::arg("dl_device") = py::none(),
           py::arg("copy") = py::none())
      .def("__dlpack_device__", [](const TensorData& t) {
            return py::make_tuple(dl_device_type(t.device), t.device.index);
          })
      .def_property_readonly("__cuda_array_interface__", [](const TensorData& t) {
            if (t.device.kind != DeviceKind::CUDA) throw py::attribute_error("__cuda_array_interface__: the data is on " + t.device.str());
            const char* fmt = buffer_format(t.array->dtype);
            if (!fmt) throw py::attribute_error("__cuda_array_interface__ has no type code for bfloat16; use __dlpack__");
            py::dict d;
            const std::string ts = py::str(py::module_::import("numpy").attr("dtype")(fmt).attr("str")).cast<std::string>();
            d["shape"] = shape_tuple(t.array->shape);
            d["typestr"] = ts;
            d["data"] = py::make_tuple(reinterpret_cast<uintptr_t>(t.array->data()), false);
            d["version"] = 3;
            d["strides"] = py::none();
            // the stream its producing work was queued on: a consumer synchronises with it (CAI v3)
            d["stream"] = py::int_(backend_for(t.device).stream_handle());
            return d;
          })
      .def("_to_host", [](const TensorData& t) { return host_td(t); }, "The data in host memory (a copy for GPU data).")
      .def("_to_device", [](const TensorData& t, const std::string& device) {
            Device d = parse_device(device);
            if (d == t.device) return t;
            TensorData h = host_td(t);
            if (d.kind == DeviceKind::CPU) return h;
            return TensorData{backend_for(d).from_host(h.array), d, true};
          })
      .def_buffer([](TensorData& t) -> py::buffer_info {
        if (t.device.kind == DeviceKind::CUDA)
          throw py::buffer_error("the data is on " + t.device.str() + ": use .numpy() or np.asarray() (they copy to the host)");
        const char* fmt = buffer_format(t.array->dtype);
        if (!fmt) throw py::buffer_error("bfloat16 has no buffer-protocol format; use .numpy() (needs ml_dtypes)");
        std::vector<py::ssize_t> shape(t.array->shape.begin(), t.array->shape.end());
        std::vector<py::ssize_t> strides;
        for (auto s : contiguous_strides(t.array->shape)) strides.push_back(py::ssize_t(s * int64_t(dtype_size(t.array->dtype))));
        return py::buffer_info(t.array->data(), py::ssize_t(dtype_size(t.array->dtype)), fmt, py::ssize_t(shape.size()),
                               shape, strides, t.readonly);
      });

  py::class_<QueuedRun, std::shared_ptr<QueuedRun>>(m, "_QueuedRun")
      .def("finished", [](QueuedRun& q) { return q.finished(false); },
           "Whether the device is done with the run (result() would not block).")
      .def("wait_finished", [](QueuedRun& q, double linger_s) {
            without_gil([&] {
              q.finished(true);
              std::this_thread::sleep_for(std::chrono::duration<double>(linger_s));
            });
          }, py::arg("linger_s"), "Blocks, without the GIL, until the run is finished, then for linger_s more.")
      .def("result", [](QueuedRun& q) {
            if (!q.waited.exchange(true) && q.run.wait) without_gil([&] { q.run.wait(); });  // once, even if it raises
            return wrap_outputs(q.outs, q.exe->device());
          }, "Waits for the run, raises its errors and returns its results.");

  py::class_<Executable, std::shared_ptr<Executable>>(m, "Executable")
      .def("run", [](Executable& e, std::vector<py::handle> inputs, std::optional<std::vector<py::handle>> out) {
            auto in = arrays_of(inputs, e.device());
            std::vector<std::shared_ptr<Array>> outs, given;
            if (out) given = arrays_of(*out, e.device(), true);
            outs = without_gil([&] { return e.run(in, out ? &given : nullptr); });
            return wrap_outputs(outs, e.device());
          }, py::arg("inputs"), py::arg("out") = py::none())
      .def("_start", [](const std::shared_ptr<Executable>& e, std::vector<py::handle> inputs,
                        std::optional<std::vector<py::handle>> out) {
            // run_async on a GPU: queues the run here and returns its QueuedRun
            auto q = std::make_shared<QueuedRun>();
            q->exe = e;
            q->inputs = arrays_of(inputs, e->device());
            if (out) q->given = arrays_of(*out, e->device(), true);
            q->outs = without_gil([&] { return e->start(q->inputs, out ? &q->given : nullptr, q->run); });
            return q;
          }, py::arg("inputs"), py::arg("out") = py::none())
      .def_property_readonly("feed_nodes", &Executable::feeds)
      .def_property_readonly("feed_types", [](const Executable& e) {
            py::list r;
            for (auto& t : e.feed_types()) r.append(py::make_tuple(shape_tuple(t.shape), t.dtype));
            return r;
          })
      .def_property_readonly("targets", [](const Executable& e) {
            py::list r;
            for (auto& t : e.targets()) r.append(py::make_tuple(t.node, t.index));
            return r;
          })
      .def_property_readonly("device", [](const Executable& e) { return e.device().str(); })
      .def_property_readonly("num_specializations", &Executable::num_specialisations)
      .def_property_readonly("num_compilations", &Executable::num_compilations)
      .def("memory_plan", [](const Executable& e) {
            py::list r;
            for (auto& p : e.memory_plan()) {
              py::dict d;
              d["node"] = p.node;
              d["op"] = p.op;
              d["storage"] = p.storage;
              d["buffer"] = p.buffer;
              d["nbytes"] = p.nbytes;
              d["alias_of"] = p.alias_of.empty() ? py::object(py::none()) : py::object(py::str(p.alias_of));
              d["stage"] = p.stage;
              r.append(d);
            }
            return r;
          });

  py::class_<Region, std::shared_ptr<Region>>(m, "Region")
      .def_property_readonly("num_captures", [](const Region& r) { return r.captures.size(); })
      .def_property_readonly("result_types", [](const Region& r) {
            py::list l;
            for (auto& t : r.result_types()) l.append(py::make_tuple(shape_tuple(t.shape), t.dtype));
            return l;
          });

  py::class_<PyGraph>(m, "Graph")
      .def(py::init<>())
      .def_property_readonly("uid", [](const PyGraph& g) { return g.graph->uid(); })
      .def("__len__", [](const PyGraph& g) { return g.graph->size(); })
      .def("add_op", [](PyGraph& g, const std::string& op, const std::vector<std::pair<int32_t, int32_t>>& inputs,
                        py::dict attrs, const std::string& name) {
            auto lock = building(g);
            const OpDef& def = get_op(op);
            Attrs a;
            for (auto kv : attrs) {
              std::string key = kv.first.cast<std::string>();
              const AttrSpec* spec = nullptr;
              for (auto& s : def.attrs) if (s.name == key) spec = &s;
              if (!spec) raise(ErrorKind::Value, op, name, "unknown attribute '" + key + "'");
              if (kv.second.is_none()) continue;
              try {
                a[key] = attr_from_py(kv.second, spec->kind, op);
              } catch (const py::cast_error&) {
                raise(ErrorKind::Type, op, name, "attribute '" + key + "' must be " + attr_kind_name(spec->kind) +
                                                     ", got " + py::repr(kv.second).cast<std::string>());
              }
            }
            std::vector<std::pair<int32_t, int32_t>> r;
            for (auto& v : g.graph->add(op, refs_arg(inputs), a, name)) r.emplace_back(v.node, v.index);
            return r;
          }, py::arg("op"), py::arg("inputs"), py::arg("attrs"), py::arg("name") = "")
      .def("node_op", [](const PyGraph& g, int32_t n) { return g.graph->node(n).op->name; })
      .def("node_name", [](const PyGraph& g, int32_t n) { return g.graph->node(n).name; })
      .def("node_inputs", [](const PyGraph& g, int32_t n) {
            std::vector<std::pair<int32_t, int32_t>> r;
            for (auto& v : g.graph->node(n).inputs) r.emplace_back(v.node, v.index);
            return r;
          })
      .def("node_attrs", [](const PyGraph& g, int32_t n) {
            py::dict d;
            for (auto& kv : g.graph->node(n).attrs) d[py::str(kv.first)] = attr_to_py(kv.second);
            return d;
          })
      .def("nodes", [](const PyGraph& g) { return nodes_py(*g.graph); },
           "Every node as a dict: id, op, name, inputs ((node, index) or None), outputs ((shape, dtype)), "
           "attrs, composite, data_dependent (some output dims known only once it runs), origin ((op, name) of the "
           "graph-level op it implements).")
      .def("expanded", [](const PyGraph& g) { return expansion_py(expand_composites(*g.graph)); },
           "The graph with every composite expanded: {nodes, groups (one per expanded composite: op, name, "
           "attrs, inputs, outputs, results, first, end, parent, source), sources (per source node: "
           "(outputs, first, end) in the expanded nodes), kept (composites left folded)}.")
      .def("num_outputs", [](const PyGraph& g, int32_t n) { return g.graph->node(n).outputs.size(); })
      .def("output_type", [](const PyGraph& g, int32_t n, int32_t i) {
            g.graph->check_ref({n, i}, "tensor");
            const TensorType& t = g.graph->type({n, i});
            return py::make_tuple(shape_tuple(t.shape), t.dtype);
          })
      .def("add_variable", [](PyGraph& g, py::object data, const std::string& name) {
            auto lock = building(g);
            TensorData td = host_td(to_tensor_data(data));
            auto owned = Array::empty(td.array->dtype, td.array->shape);  // the graph owns its state
            if (owned->nbytes()) std::memcpy(owned->data(), td.array->data(), owned->nbytes());
            return g.graph->add_variable(owned, name);
          })
      .def("variable_value", [](PyGraph& g, int64_t id) {
            auto v = g.graph->variables()->get(id);
            return TensorData{v, Device{}, false};
          })
      .def("set_variable", [](PyGraph& g, int64_t id, py::object data) {
            TensorData td = host_td(to_tensor_data(data));
            auto& store = *g.graph->variables();
            TensorType want;
            {
              std::lock_guard<std::mutex> l(store.mu);
              want = store.slots.at(size_t(id)).type;
            }
            if (td.array->dtype != want.dtype || td.array->shape != want.shape)
              raise(ErrorKind::Value, "set_variable", store.slots.at(size_t(id)).name,
                    "value of type " + type_str({td.array->dtype, td.array->shape}) + " does not match the variable's " +
                        type_str(want));
            auto owned = Array::empty(want.dtype, want.shape);
            if (owned->nbytes()) std::memcpy(owned->data(), td.array->data(), owned->nbytes());
            store.set(id, owned);
          })
      .def("run", [](PyGraph& g, const std::vector<int32_t>& feeds, std::vector<py::handle> datas,
                     const std::vector<std::pair<int32_t, int32_t>>& targets, const std::vector<int32_t>& target_ops,
                     const std::string& device) {
            Device d = parse_device(device);
            auto in = arrays_of(datas, d);
            std::vector<TensorType> types;
            for (auto& a : in) types.push_back({a->dtype, a->shape});
            std::vector<std::shared_ptr<Array>> outs;
            outs = without_gil([&] { return g.cache.get(g.graph, feeds, types, refs_arg(targets), target_ops, d)->run(in); });
            return wrap_outputs(outs, d);
          })
      .def("compile", [](PyGraph& g, const std::vector<int32_t>& feeds, std::vector<py::handle> types,
                         const std::vector<std::pair<int32_t, int32_t>>& targets, const std::vector<int32_t>& target_ops,
                         const std::string& device) {
            std::vector<TensorType> tt;
            for (auto& t : types) tt.push_back(type_arg(t));
            Device d = parse_device(device);
            return without_gil([&] { return std::make_shared<Executable>(g.graph, feeds, tt, refs_arg(targets), target_ops, d); });
          })
      .def("begin_region", [](PyGraph& g, std::vector<py::handle> types, const std::string& what) {
            auto lock = building(g);
            std::vector<TensorType> tt;
            for (auto& t : types) tt.push_back(type_arg(t));
            return refs_py(g.graph->begin_region(tt, what));
          })
      .def("end_region", [](PyGraph& g, const std::vector<std::pair<int32_t, int32_t>>& results) {
            auto lock = building(g);
            return g.graph->end_region(refs_arg(results));
          })
      .def("abandon_region", [](PyGraph& g) {
            auto lock = building(g);
            g.graph->abandon_region();
          })
      .def("build_if", [](PyGraph& g, std::pair<int32_t, int32_t> pred, RegionHandle then_r, RegionHandle else_r,
                          const std::string& name) {
            auto lock = building(g);
            return refs_py(build_if(*g.graph, {pred.first, pred.second}, then_r, else_r, name));
          })
      .def("build_while", [](PyGraph& g, const std::vector<std::pair<int32_t, int32_t>>& initial, RegionHandle before,
                             RegionHandle after, const std::string& name, bool checkpoint) {
            auto lock = building(g);
            return refs_py(build_while(*g.graph, refs_arg(initial), before, after, name, checkpoint));
          })
      .def("build_for", [](PyGraph& g, std::pair<int32_t, int32_t> lower, std::pair<int32_t, int32_t> upper,
                           std::pair<int32_t, int32_t> step, const std::vector<std::pair<int32_t, int32_t>>& initial,
                           RegionHandle body, const std::string& name, bool checkpoint) {
            auto lock = building(g);
            return refs_py(build_for(*g.graph, {lower.first, lower.second}, {upper.first, upper.second},
                                     {step.first, step.second}, refs_arg(initial), body, name, checkpoint));
          })
      .def("gradients", [](PyGraph& g, std::pair<int32_t, int32_t> y,
                           const std::vector<std::pair<int32_t, int32_t>>& xs, std::optional<std::pair<int32_t, int32_t>> dy) {
            auto lock = building(g);
            std::vector<std::pair<int32_t, int32_t>> r;
            ValueRef d = dy ? ValueRef{dy->first, dy->second} : ValueRef{};
            for (auto& v : gradients(*g.graph, {y.first, y.second}, refs_arg(xs), d)) r.emplace_back(v.node, v.index);
            return r;
          })
      .def("cache_info", [](const PyGraph& g) {
            auto i = g.cache.info();
            py::dict d;
            d["hits"] = i.hits;
            d["misses"] = i.misses;
            d["size"] = i.size;
            d["capacity"] = i.capacity;
            return d;
          })
      .def("clear_cache", [](PyGraph& g) { g.cache.clear(); })
      .def("set_cache_capacity", [](PyGraph& g, size_t c) { g.cache.set_capacity(c); });

  m.def("op_schemas", [] {
    py::list r;
    for (auto* op : all_ops()) r.append(schema_dict(*op));
    return r;
  });
  m.def("set_profiling", &set_profiling, "Times every kernel of every run (CPU backend) until turned off.");
  m.def("take_profile", [] {
    ProfileTotals t = take_profile();
    auto as_dict = [](const std::map<std::string, OpProfile>& m) {
      py::dict d;
      for (auto& kv : m) d[py::str(kv.first)] = py::make_tuple(kv.second.seconds, kv.second.calls);
      return d;
    };
    return py::make_tuple(as_dict(t.graph_ops), as_dict(t.kernels), as_dict(t.steps));
  }, "Returns ({graph op: (seconds, calls)}, {kernel op: ...}, {step: ...}) since the last call, and clears them.");
  m.def("devices", [] {
    std::vector<std::string> r;
    for (auto& d : available_devices()) r.push_back(d.str());
    return r;
  });
  m.def("default_device", [] { return default_device().str(); });
  m.def("device_status", [](const std::string& s) {
    // (available, why not, description) without raising
    Device d = parse_device(s);
    try {
      Backend& be = backend_for(d);
      return py::make_tuple(true, std::string(), be.describe());
    } catch (const GraphError& e) {
      return py::make_tuple(false, std::string(e.what()), std::string());
    }
  });
#ifdef MG_HAVE_CUDA
  m.def("cuda_kernel_names", &cuda::kernel_ops,
        "Ops with a kernel in the cuda backend (a static table: no GPU needed). Composites are expanded "
        "before it is consulted. Defined only where the cuda backend is built.");
#endif
  m.def("check_device", [](const std::string& s) {
    Device d = parse_device(s);
    backend_for(d);
    return d.str();
  });
}
