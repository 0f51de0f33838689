// pybind11 bindings: thin wrappers over the C++ API. Op methods are generated in Python
// from op_schemas(); nothing here knows any particular op.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "bindings/dlpack.h"
#include "core/autodiff.h"
#include "core/control_flow.h"
#include "core/expand.h"
#include "core/graph.h"
#include "core/registry.h"
#include "runtime/executable.h"
#include "runtime/profile.h"
#include "runtime/tensor_data.h"

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
    default: return nullptr;  // bfloat16 has no buffer-protocol code
  }
}

DLDataType dl_dtype(DType t) {
  uint8_t bits = uint8_t(dtype_size(t) * 8);
  if (is_bool(t)) return {kDLBool, 8, 1};
  if (t == DType::BFloat16) return {kDLBfloat, 16, 1};
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
  return h.cast<DType>();
}

// ---------- wrapping host memory ----------

TensorData from_buffer(py::buffer obj) {
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
  Shape shape(info.shape.begin(), info.shape.end());
  int64_t n = num_elements(shape);
  bool contiguous = true;
  int64_t expect = info.itemsize;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && info.strides[i] != expect) contiguous = false;
    expect *= shape[i];
  }
  bool aligned = reinterpret_cast<uintptr_t>(info.ptr) % size_t(info.itemsize) == 0;
  TensorData td;
  td.device = Device{};
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
    // gather element by element through the strides (visible: td.copied)
    const char* base = static_cast<const char*>(info.ptr);
    char* dst = static_cast<char*>(arr->buffer->data);
    std::vector<int64_t> idx(shape.size(), 0);
    for (int64_t e = 0; e < n; ++e) {
      int64_t off = 0;
      for (size_t d = 0; d < shape.size(); ++d) off += idx[d] * info.strides[d];
      std::memcpy(dst + e * info.itemsize, base + off, size_t(info.itemsize));
      for (size_t d = shape.size(); d-- > 0;) {
        if (++idx[d] < shape[d]) break;
        idx[d] = 0;
      }
    }
    td.copied = true;
  }
  td.array = arr;
  return td;
}

TensorData from_dlpack_capsule(py::capsule cap, py::object producer) {
  if (std::strcmp(cap.name(), "dltensor") != 0) throw GraphError(ErrorKind::Value, "[TensorData] expected a 'dltensor' capsule");
  auto* m = static_cast<DLManagedTensor*>(cap.get_pointer());
  DLTensor& t = m->dl_tensor;
  const bool on_cuda = t.device.device_type == kDLCUDA;
  if (t.device.device_type != kDLCPU && t.device.device_type != kDLCUDAHost && !on_cuda)
    throw GraphError(ErrorKind::Value, "[TensorData] DLPack tensor on device type " + std::to_string(t.device.device_type) +
                          " cannot be used: mpsgraph takes cpu and cuda tensors");
  auto dt = from_dl_dtype(t.dtype);
  if (!dt) throw GraphError(ErrorKind::Type, "[TensorData] unsupported DLPack dtype code " + std::to_string(t.dtype.code) + " bits " +
                                std::to_string(t.dtype.bits));
  Shape shape(t.shape, t.shape + t.ndim);
  if (t.strides) {
    int64_t expect = 1;
    for (int i = t.ndim; i-- > 0;) {
      if (shape[size_t(i)] != 1 && t.strides[i] != expect)
        throw GraphError(ErrorKind::Value, "[TensorData] non-contiguous DLPack tensors are not supported; make it contiguous first");
      expect *= shape[size_t(i)];
    }
  }
  PyCapsule_SetName(cap.ptr(), "used_dltensor");
  auto owner = std::shared_ptr<void>(m, [](void* p) {
    auto* mt = static_cast<DLManagedTensor*>(p);
    if (mt->deleter) {
      py::gil_scoped_acquire g;
      mt->deleter(mt);
    }
  });
  (void)producer;
  auto arr = std::make_shared<Array>();
  arr->dtype = *dt;
  arr->shape = shape;
  char* data = static_cast<char*>(t.data) + t.byte_offset;
  arr->buffer = Buffer::borrow(data, arr->nbytes(), owner);
  return TensorData{arr, on_cuda ? Device{DeviceKind::CUDA, t.device.device_id} : Device{}, false};
}

int dl_device_type(const Device& d) {
  return d.kind == DeviceKind::Metal ? kDLMetal : d.kind == DeviceKind::CUDA ? kDLCUDA : kDLCPU;
}

// The same data in host memory (a copy for device-resident data).
TensorData host_td(const TensorData& td) {
  if (td.device.kind != DeviceKind::CUDA) return td;
  return TensorData{backend_for(td.device).to_host(td.array), Device{}, true};
}

struct DLExport {
  DLManagedTensor managed;
  std::shared_ptr<Array> keep;
  std::vector<int64_t> shape;
};

py::capsule to_dlpack(const TensorData& td) {
  auto* ex = new DLExport();
  ex->keep = td.array;
  ex->shape = td.array->shape;
  DLTensor& t = ex->managed.dl_tensor;
  t.data = td.array->data();
  t.device = {dl_device_type(td.device), td.device.index};
  t.ndim = int32_t(ex->shape.size());
  t.dtype = dl_dtype(td.array->dtype);
  t.shape = ex->shape.data();
  t.strides = nullptr;
  t.byte_offset = 0;
  ex->managed.manager_ctx = ex;
  ex->managed.deleter = [](DLManagedTensor* self) { delete static_cast<DLExport*>(self->manager_ctx); };
  // A capsule never consumed is freed by its destructor.
  return py::capsule(&ex->managed, "dltensor", [](PyObject* cap) {
    if (PyCapsule_IsValid(cap, "dltensor")) {
      auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
      if (m && m->deleter) m->deleter(m);
    }
  });
}

TensorData to_tensor_data(py::handle h) {
  if (py::isinstance<TensorData>(h)) return h.cast<TensorData>();
  if (py::hasattr(h, "__dlpack__") && !PyObject_CheckBuffer(h.ptr())) {
    // a CUDA producer is asked to order its work before the legacy default stream (1), which
    // the cuda backend's blocking stream follows (DLPack's stream semantics)
    bool cuda = false;
    if (py::hasattr(h, "__dlpack_device__")) cuda = h.attr("__dlpack_device__")().cast<py::tuple>()[0].cast<int>() == kDLCUDA;
    py::object cap = cuda ? h.attr("__dlpack__")(py::arg("stream") = 1) : h.attr("__dlpack__")();
    return from_dlpack_capsule(cap.cast<py::capsule>(), py::reinterpret_borrow<py::object>(h));
  }
  if (PyObject_CheckBuffer(h.ptr())) return from_buffer(py::reinterpret_borrow<py::buffer>(h));
  throw GraphError(ErrorKind::Type, "[TensorData] cannot use an object of type '" + std::string(Py_TYPE(h.ptr())->tp_name) +
                       "' as tensor data: pass a numpy array, a buffer, a DLPack tensor or TensorData");
}

// Arrays for a run on `device`: data on another device is copied (GPU data to the host for
// a cpu run; host data goes to the GPU inside the cuda backend's run, through staging).
std::vector<std::shared_ptr<Array>> arrays_of(const std::vector<py::handle>& hs, const Device& device) {
  std::vector<std::shared_ptr<Array>> r;
  for (auto& h : hs) {
    TensorData td = to_tensor_data(h);
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

Shape shape_arg(const py::handle& h) {
  Shape s;
  for (auto d : h) s.push_back(d.is_none() ? kUnknownDim : d.cast<int64_t>());
  return s;
}

TensorType type_arg(const py::handle& h) {
  py::sequence seq = py::reinterpret_borrow<py::sequence>(h);
  return {dtype_arg(seq[1]), shape_arg(seq[0])};
}

AttrValue attr_from_py(const py::handle& v, AttrKind kind) {
  switch (kind) {
    case AttrKind::Int: return v.cast<int64_t>();
    case AttrKind::Float: return v.cast<double>();
    case AttrKind::Bool: return v.cast<bool>();
    case AttrKind::String: return v.cast<std::string>();
    case AttrKind::Ints: case AttrKind::Axes: return v.cast<std::vector<int64_t>>();
    case AttrKind::Shape: return shape_arg(v);
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
      .value("float64", DType::Float64);
  m.def("dtype_size", &dtype_size);

  py::class_<TensorData>(m, "TensorData", py::buffer_protocol())
      .def(py::init([](py::object obj) { return to_tensor_data(obj); }), py::arg("data"),
           "Wraps a contiguous host array (numpy, buffer protocol, DLPack) without copying.")
      .def_static("empty", [](py::object shape, py::object dtype) {
            return TensorData{Array::empty(dtype_arg(dtype), shape_arg(shape)), Device{}, false};
          }, py::arg("shape"), py::arg("dtype"))
      .def_property_readonly("shape", [](const TensorData& t) { return shape_tuple(t.array->shape); })
      .def_property_readonly("dtype", [](const TensorData& t) { return t.array->dtype; })
      .def_property_readonly("device", [](const TensorData& t) { return t.device.str(); })
      .def_property_readonly("nbytes", [](const TensorData& t) { return t.array->nbytes(); })
      .def_property_readonly("copied", [](const TensorData& t) { return t.copied; },
                             "True when making this TensorData needed a copy (a non-contiguous source).")
      .def_property_readonly("data_ptr", [](const TensorData& t) { return reinterpret_cast<uintptr_t>(t.array->data()); })
      .def("_reinterpret", [](const TensorData& t, DType d) {
            if (dtype_size(d) != dtype_size(t.array->dtype)) throw GraphError(ErrorKind::Value, "[TensorData] reinterpret needs equal sizes");
            auto a = std::make_shared<Array>(*t.array);
            a->dtype = d;
            return TensorData{a, t.device, t.copied};
          })
      .def("_raw", [](const TensorData& t) {
            // a uint8 view of the bytes, for dtypes without a buffer code (bfloat16)
            return py::memoryview::from_memory(t.array->data(), py::ssize_t(t.array->nbytes()), false);
          }, py::keep_alive<0, 1>())
      .def("__dlpack__", [](const TensorData& t, py::object stream, py::object max_version, py::object dl_device,
                            py::object copy) {
            // results are complete when run() returns (it synchronises): no stream to order
            return to_dlpack(t);
          },
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
            d["stream"] = py::none();  // complete: run() synchronised
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
                               shape, strides, false);
      });

  py::class_<Executable, std::shared_ptr<Executable>>(m, "Executable")
      .def("run", [](Executable& e, std::vector<py::handle> inputs, std::optional<std::vector<py::handle>> out) {
            auto in = arrays_of(inputs, e.device());
            std::vector<std::shared_ptr<Array>> outs, given;
            if (out) given = arrays_of(*out, e.device());
            {
              py::gil_scoped_release nogil;
              outs = e.run(in, out ? &given : nullptr);
            }
            return wrap_outputs(outs, e.device());
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
            const OpDef& def = get_op(op);
            Attrs a;
            for (auto kv : attrs) {
              std::string key = kv.first.cast<std::string>();
              const AttrSpec* spec = nullptr;
              for (auto& s : def.attrs) if (s.name == key) spec = &s;
              if (!spec) raise(ErrorKind::Value, op, name, "unknown attribute '" + key + "'");
              if (kv.second.is_none()) continue;
              try {
                a[key] = attr_from_py(kv.second, spec->kind);
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
            {
              py::gil_scoped_release nogil;
              auto exe = g.cache.get(g.graph, feeds, types, refs_arg(targets), target_ops, d);
              outs = exe->run(in);
            }
            return wrap_outputs(outs, d);
          })
      .def("compile", [](PyGraph& g, const std::vector<int32_t>& feeds, std::vector<py::handle> types,
                         const std::vector<std::pair<int32_t, int32_t>>& targets, const std::vector<int32_t>& target_ops,
                         const std::string& device) {
            std::vector<TensorType> tt;
            for (auto& t : types) tt.push_back(type_arg(t));
            Device d = parse_device(device);
            py::gil_scoped_release nogil;
            return std::make_shared<Executable>(g.graph, feeds, tt, refs_arg(targets), target_ops, d);
          })
      .def("begin_region", [](PyGraph& g, std::vector<py::handle> types, const std::string& what) {
            std::vector<TensorType> tt;
            for (auto& t : types) tt.push_back(type_arg(t));
            return refs_py(g.graph->begin_region(tt, what));
          })
      .def("end_region", [](PyGraph& g, const std::vector<std::pair<int32_t, int32_t>>& results) {
            return g.graph->end_region(refs_arg(results));
          })
      .def("abandon_region", [](PyGraph& g) { g.graph->abandon_region(); })
      .def("build_if", [](PyGraph& g, std::pair<int32_t, int32_t> pred, RegionHandle then_r, RegionHandle else_r,
                          const std::string& name) {
            return refs_py(build_if(*g.graph, {pred.first, pred.second}, then_r, else_r, name));
          })
      .def("build_while", [](PyGraph& g, const std::vector<std::pair<int32_t, int32_t>>& initial, RegionHandle before,
                             RegionHandle after, const std::string& name, bool checkpoint) {
            return refs_py(build_while(*g.graph, refs_arg(initial), before, after, name, checkpoint));
          })
      .def("build_for", [](PyGraph& g, std::pair<int32_t, int32_t> lower, std::pair<int32_t, int32_t> upper,
                           std::pair<int32_t, int32_t> step, const std::vector<std::pair<int32_t, int32_t>>& initial,
                           RegionHandle body, const std::string& name, bool checkpoint) {
            return refs_py(build_for(*g.graph, {lower.first, lower.second}, {upper.first, upper.second},
                                     {step.first, step.second}, refs_arg(initial), body, name, checkpoint));
          })
      .def("gradients", [](PyGraph& g, std::pair<int32_t, int32_t> y,
                           const std::vector<std::pair<int32_t, int32_t>>& xs, std::optional<std::pair<int32_t, int32_t>> dy) {
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
    return py::make_tuple(as_dict(t.graph_ops), as_dict(t.kernels));
  }, "Returns ({graph op: (seconds, calls)}, {kernel op: (seconds, calls)}) since the last call, and clears them.");
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
  m.def("check_device", [](const std::string& s) {
    Device d = parse_device(s);
    backend_for(d);
    return d.str();
  });
}
