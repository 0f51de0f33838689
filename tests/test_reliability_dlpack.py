"""DLPack to the letter of the spec (issue 13, item 3): __dlpack__(stream, max_version,
dl_device, copy) honours copy; versioned (1.x) capsules in and out with the read-only flag
respected; hostile producers (bad or NULL capsule names, a __dlpack__ returning something
else or raising, bad shapes, dtypes, versions) give a GraphError naming __dlpack__; strided
DLPack inputs are copied once. The producers here are built with ctypes from the spec."""
import ctypes
from ctypes import CFUNCTYPE, POINTER, Structure, c_char_p, c_int32, c_int64, c_uint8, c_uint16, c_uint32, c_uint64, \
    c_void_p, py_object

import numpy as np
import pytest

import mpsgraph as mg


class DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32), ("dtype", DLDataType),
                ("shape", POINTER(c_int64)), ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


DELETER = CFUNCTYPE(None, c_void_p)


class DLManagedTensor(Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p), ("deleter", DELETER)]


class DLPackVersion(Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32)]


class DLManagedTensorVersioned(Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", c_void_p), ("deleter", DELETER), ("flags", c_uint64),
                ("dl_tensor", DLTensor)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = py_object
_capsule_new.argtypes = [c_void_p, c_char_p, c_void_p]
_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype = c_char_p
_capsule_name.argtypes = [py_object]

F32 = (2, 32, 1)


class Producer:
    """A DLPack producer over a numpy array, every field of which a test may falsify."""

    def __init__(self, arr, *, name=b"dltensor", versioned=None, flags=0, strides=None, shape=None, dtype=F32,
                 version=(1, 0), data=None, device=(1, 0), old_signature=False):
        self.arr, self.name, self.versioned, self.flags = arr, name, versioned, flags
        self.strides, self.shape, self.dtype, self.version = strides, shape, dtype, version
        self.data, self.device, self.old_signature = data, device, old_signature
        self.deleted = 0
        self.calls = []
        self._keep = []

    def __dlpack__(self, *args, **kwargs):
        if self.old_signature and kwargs:
            raise TypeError("__dlpack__() got an unexpected keyword argument")
        self.calls.append(kwargs)
        versioned = self.versioned if self.versioned is not None else kwargs.get("max_version") is not None
        shape = self.shape if self.shape is not None else self.arr.shape
        shp = (c_int64 * max(len(shape), 1))(*shape)
        st = None
        if self.strides is not None:
            st = (c_int64 * max(len(self.strides), 1))(*self.strides)
        t = DLTensor(self.arr.ctypes.data if self.data is None else self.data, DLDevice(*self.device), len(shape),
                     DLDataType(*self.dtype), ctypes.cast(shp, POINTER(c_int64)),
                     ctypes.cast(st, POINTER(c_int64)) if st is not None else None, 0)

        def deleter(_):
            self.deleted += 1
        d = DELETER(deleter)
        if versioned:
            m = DLManagedTensorVersioned(DLPackVersion(*self.version), None, d, self.flags, t)
            name = b"dltensor_versioned" if self.name == b"dltensor" else self.name
        else:
            m = DLManagedTensor(t, None, d)
            name = self.name
        self._keep += [shp, st, d, m, name]
        return _capsule_new(ctypes.addressof(m), name, None)


# ---------------- import ----------------

def test_versioned_capsule_is_read_and_deleted_once():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    p = Producer(a)
    td = mg.TensorData(p)
    assert p.calls[0].get("max_version") == (1, 0)  # a versioned capsule was asked for
    assert td.data_ptr == a.ctypes.data and not td.copied and not td.readonly
    np.testing.assert_array_equal(np.asarray(td), a)
    assert p.deleted == 0
    del td
    assert p.deleted == 1


def test_producer_without_max_version_gets_the_old_call():
    a = np.arange(4, dtype=np.float32)
    p = Producer(a, old_signature=True)
    td = mg.TensorData(p)
    np.testing.assert_array_equal(np.asarray(td), a)
    del td
    assert p.deleted == 1


def test_read_only_flag_is_respected():
    a = np.arange(4, dtype=np.float32)
    p = Producer(a, flags=1)  # DLPACK_FLAG_BITMASK_READ_ONLY
    td = mg.TensorData(p)
    assert td.readonly
    view = np.asarray(td)
    assert not view.flags.writeable
    # usable as an input, never as an out= buffer
    g = mg.Graph()
    x = g.placeholder((4,), mg.float32, name="x")
    exe = g.compile({x: ((4,), mg.float32)}, [x * 2.0])
    np.testing.assert_array_equal(np.asarray(exe.run([td])[0]), a * 2)
    with pytest.raises(mg.GraphValueError, match=r"read-only"):
        exe.run([a], out=[td])
    with pytest.raises(mg.GraphValueError, match=r"read-only"):
        exe.run([a], out=[Producer(np.zeros(4, np.float32), flags=1)])
    # re-exported, it stays read-only: versioned with the flag, refused unversioned
    back = np.from_dlpack(td)
    assert not back.flags.writeable
    with pytest.raises(BufferError, match="read-only"):
        td.__dlpack__()
    np.testing.assert_array_equal(a, np.arange(4, dtype=np.float32))


def test_strided_dlpack_input_is_copied_once():
    a = np.arange(20, dtype=np.float32).reshape(4, 5)
    p = Producer(a, shape=(4, 3), strides=(5, 2))  # a[:, ::2][:, :3], strides in elements
    td = mg.TensorData(p)
    assert td.copied and not td.readonly
    np.testing.assert_array_equal(np.asarray(td), a[:, ::2][:, :3])
    assert p.deleted == 1  # the producer's memory is released right after the copy
    # negative and zero strides are strides too
    td2 = mg.TensorData(Producer(a, shape=(5,), strides=(0,)))
    np.testing.assert_array_equal(np.asarray(td2), np.zeros(5, np.float32))
    with pytest.raises(mg.GraphValueError, match=r"not C-contiguous"):
        g = mg.Graph()
        x = g.placeholder((4, 3), mg.float32)
        g.compile({x: ((4, 3), mg.float32)}, [x + 1.0]).run([np.ones((4, 3), np.float32)], out=[
            Producer(np.zeros((4, 5), np.float32), shape=(4, 3), strides=(5, 1))])


@pytest.mark.parametrize("name", [b"foo", b"used_dltensor", b"used_dltensor_versioned", None])
def test_bad_capsule_names_are_refused(name):
    a = np.arange(4, dtype=np.float32)
    with pytest.raises(mg.GraphValueError, match=r"__dlpack__.*(name|capsule)"):
        mg.TensorData(Producer(a, name=name, versioned=False))


def test_dlpack_returning_something_else_is_refused():
    class Liar:
        def __dlpack__(self, **kw):
            return 42

    class Raiser:
        def __dlpack__(self, **kw):
            raise RuntimeError("producer exploded")

    with pytest.raises(mg.GraphTypeError, match=r"__dlpack__.*'int'"):
        mg.TensorData(Liar())
    with pytest.raises(mg.GraphValueError, match=r"__dlpack__.*producer exploded"):
        mg.TensorData(Raiser())
    g = mg.Graph()
    x = g.placeholder((4,), mg.float32, name="x")
    with pytest.raises(mg.GraphError, match=r"__dlpack__"):
        g.run({x: Liar()}, [x + 1.0])


@pytest.mark.parametrize("kw,match", [
    (dict(shape=(2, -3)), r"__dlpack__.*-3"),
    (dict(shape=(2**62, 8)), r"__dlpack__.*too large"),
    (dict(dtype=(2, 32, 4)), r"__dlpack__.*lanes 4"),
    (dict(dtype=(5, 32, 1)), r"__dlpack__.*dtype"),
    (dict(version=(2, 0)), r"__dlpack__.*2\.0"),
    (dict(data=0), r"__dlpack__.*NULL"),
    (dict(device=(2, 0)), r"__dlpack__.*device type 2"),
])
def test_hostile_producer_fields_are_refused(kw, match):
    a = np.arange(4, dtype=np.float32)
    versioned = True if "version" in kw else None
    p = Producer(a, versioned=versioned, **kw)
    with pytest.raises(mg.GraphError, match=match):
        mg.TensorData(p)
    assert p.deleted == 0  # refused before taking ownership: the capsule stays the producer's


# ---------------- export ----------------

def test_export_versioned_and_unversioned():
    td = mg.TensorData(np.arange(3, dtype=np.float32))
    assert _capsule_name(td.__dlpack__()) == b"dltensor"
    assert _capsule_name(td.__dlpack__(max_version=(0, 8))) == b"dltensor"
    assert _capsule_name(td.__dlpack__(max_version=(1, 0))) == b"dltensor_versioned"
    assert _capsule_name(td.__dlpack__(max_version=(1, 3))) == b"dltensor_versioned"
    assert td.__dlpack_device__() == (1, 0)


def test_export_honours_copy():
    a = np.arange(6, dtype=np.float32)
    td = mg.TensorData(a)
    shared = np.from_dlpack(td, copy=False)
    assert np.shares_memory(shared, a)
    copied = np.from_dlpack(td, copy=True)
    assert not np.shares_memory(copied, a)
    np.testing.assert_array_equal(copied, a)
    a[0] = 100.0
    assert copied[0] == 0.0 and shared[0] == 100.0
    # our own import of our own export, both ways
    back = mg.TensorData(Wrapper(td, copy=True))
    assert back.data_ptr != td.data_ptr
    np.testing.assert_array_equal(np.asarray(back), a)


class Wrapper:
    def __init__(self, td, **fixed):
        self.td, self.fixed = td, fixed

    def __dlpack__(self, **kw):
        kw.update(self.fixed)
        return self.td.__dlpack__(**kw)


def test_export_refuses_streams_and_other_devices():
    td = mg.TensorData(np.arange(3, dtype=np.float32))
    with pytest.raises(BufferError, match="stream"):
        td.__dlpack__(stream=1)
    with pytest.raises(BufferError, match="device"):
        td.__dlpack__(dl_device=(2, 0))
    assert _capsule_name(td.__dlpack__(dl_device=(1, 0))) == b"dltensor"


def test_unconsumed_exports_are_freed():
    import gc
    import weakref
    a = np.arange(1000, dtype=np.float32)
    td = mg.TensorData(a)
    ref = weakref.ref(a)
    del a
    for _ in range(100):
        td.__dlpack__(max_version=(1, 0))
        td.__dlpack__()
    del td
    gc.collect()
    assert ref() is None  # every capsule released its hold on the array


def test_torch_round_trip_versioned():
    torch = pytest.importorskip("torch")
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    td = mg.TensorData(t)
    assert td.data_ptr == t.data_ptr() and not td.copied
    back = torch.from_dlpack(td)
    assert back.data_ptr() == t.data_ptr()
    s = torch.arange(12, dtype=torch.float32).reshape(3, 4)[:, ::2]
    tds = mg.TensorData(s)
    assert tds.copied
    np.testing.assert_array_equal(np.asarray(tds), s.numpy())


class _GpuArrayWithBuffer(bytearray):
    """Says it lives on cuda:0 yet offers the buffer protocol (as CuPy and JAX arrays do, which
    refuse it for GPU memory): its DLPack side must decide, never its host buffer."""
    streams = []

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None, **kw):
        self.streams.append(stream)
        raise RuntimeError("no GPU memory behind this test object")


def test_gpu_dlpack_objects_are_not_read_through_their_buffer():
    obj = _GpuArrayWithBuffer(b"\0" * 16)
    if mg.Device("cuda:0").available:  # asked with the backend's stream (an int beyond 0, 1, 2)
        with pytest.raises(mg.GraphValueError, match=r"__dlpack__\(\) raised .*no GPU memory"):
            mg.TensorData(obj)
        assert len(obj.streams) == 1 and isinstance(obj.streams[0], int) and obj.streams[0] > 2
    else:
        with pytest.raises(mg.GraphValueError, match=r"\[TensorData\] __dlpack__ object is on device type 2 \(cuda:0\)"):
            mg.TensorData(obj)
        assert obj.streams == []
