"""Buffers are handed over without copies (ARCHITECTURE.md section 8, "Buffers"): numpy, the
buffer protocol and DLPack in and out; outputs a caller holds are never overwritten; out=
writes into the caller's buffers. Non-contiguous inputs are copied once, visibly."""
import gc

import ml_dtypes
import numpy as np
import pytest

import mpsgraph as mg

F32 = mg.float32


def _exe(shape=(4, 5), dtype=F32, fn=None):
    g = mg.Graph()
    x = g.placeholder(shape, dtype, name="x")
    y = fn(g, x) if fn else x * 3.0 + 1.0
    return g, x, y, g.compile({x: (shape, dtype)}, [y])


# ---------------- inputs ----------------

def test_tensordata_shares_numpy_memory():
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)
    td = mg.TensorData(arr)
    assert td.data_ptr == arr.ctypes.data
    assert td.copied is False
    assert td.shape == (3, 4) and td.dtype == F32 and td.nbytes == arr.nbytes
    view = np.asarray(td)
    assert np.shares_memory(view, arr)
    arr[1, 2] = 100.0  # numpy write visible through the TensorData
    assert np.asarray(td)[1, 2] == 100.0
    assert td.numpy()[1, 2] == 100.0
    view[0, 0] = -5.0  # and the other way
    assert arr[0, 0] == -5.0


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
                                   "float16", "float32", "float64"])
def test_tensordata_shares_memory_every_dtype(dtype):
    arr = (np.arange(6) % 2).astype(dtype).reshape(2, 3)
    td = mg.TensorData(arr)
    assert td.data_ptr == arr.ctypes.data and not td.copied
    assert td.dtype == mg.as_dtype(dtype)
    assert np.asarray(td).dtype == arr.dtype
    assert np.shares_memory(np.asarray(td), arr)


def test_tensordata_keeps_the_source_alive():
    arr = np.arange(1000, dtype=np.float32)
    ptr = arr.ctypes.data
    td = mg.TensorData(arr)
    del arr
    gc.collect()
    assert td.data_ptr == ptr
    np.testing.assert_array_equal(np.asarray(td), np.arange(1000, dtype=np.float32))


def test_contiguous_feed_is_used_in_place():
    g, x, y, exe = _exe()
    arr = np.ones((4, 5), np.float32)
    td = mg.TensorData(arr)
    assert td.copied is False and td.data_ptr == arr.ctypes.data
    np.testing.assert_array_equal(np.asarray(exe.run([td])[0]), np.full((4, 5), 4.0))
    arr[...] = np.arange(20, dtype=np.float32).reshape(4, 5)  # mutate the caller's array only
    np.testing.assert_array_equal(np.asarray(exe.run([td])[0]), np.arange(20).reshape(4, 5) * 3.0 + 1.0)
    # the same through Graph.run
    arr[...] = 2.0
    np.testing.assert_array_equal(np.asarray(g.run({x: td}, [y])[y]), np.full((4, 5), 7.0))


def test_non_contiguous_feed_is_copied_and_correct():
    g, x, y, exe = _exe()
    base = np.arange(40, dtype=np.float32).reshape(4, 10)
    view = base[:, ::2]
    td = mg.TensorData(view)
    assert td.copied is True
    assert td.data_ptr != view.ctypes.data
    np.testing.assert_array_equal(np.asarray(td), view)
    np.testing.assert_array_equal(np.asarray(exe.run([td])[0]), view.astype(np.float64) * 3 + 1)
    np.testing.assert_array_equal(np.asarray(exe.run([view])[0]), view.astype(np.float64) * 3 + 1)
    fortran = np.asfortranarray(np.arange(20, dtype=np.float32).reshape(4, 5))
    tf = mg.TensorData(fortran)
    assert tf.copied is True
    np.testing.assert_array_equal(np.asarray(exe.run([fortran])[0]), fortran.astype(np.float64) * 3 + 1)
    transposed = np.arange(20, dtype=np.float32).reshape(5, 4).T
    np.testing.assert_array_equal(np.asarray(g.run({x: transposed}, [y])[y]), transposed.astype(np.float64) * 3 + 1)


def test_misaligned_feed_is_copied_and_correct():
    raw = np.zeros(4 * 20 + 1, np.uint8)
    mis = raw[1:].view(np.float32).reshape(4, 5)  # 1 byte off float alignment
    mis[...] = np.arange(20).reshape(4, 5)
    td = mg.TensorData(mis)
    assert td.copied is True
    g, x, y, exe = _exe()
    np.testing.assert_array_equal(np.asarray(exe.run([td])[0]), np.arange(20).reshape(4, 5) * 3.0 + 1.0)


def test_read_only_feed_works():
    arr = np.arange(20, dtype=np.float32).reshape(4, 5)
    arr.flags.writeable = False
    td = mg.TensorData(arr)
    assert td.data_ptr == arr.ctypes.data
    g, x, y, exe = _exe()
    np.testing.assert_array_equal(np.asarray(exe.run([arr])[0]), arr.astype(np.float64) * 3 + 1)


def test_feed_through_memoryview_and_bytearray():
    arr = np.arange(20, dtype=np.float32).reshape(4, 5)
    mv = memoryview(arr)
    td = mg.TensorData(mv)
    assert td.data_ptr == arr.ctypes.data and td.shape == (4, 5)
    g, x, y, exe = _exe()
    np.testing.assert_array_equal(np.asarray(exe.run([mv])[0]), arr.astype(np.float64) * 3 + 1)
    ba = bytearray(b"\x01\x02\x03")
    tb = mg.TensorData(ba)
    assert tb.dtype == mg.uint8 and tb.shape == (3,)
    np.testing.assert_array_equal(np.asarray(tb), [1, 2, 3])


# ---------------- outputs ----------------

def test_outputs_expose_the_buffer_protocol_without_copy():
    g, x, y, exe = _exe()
    out = exe.run([np.ones((4, 5), np.float32)])[0]
    a = np.asarray(out)
    b = out.numpy()
    assert a.ctypes.data == out.data_ptr
    assert np.shares_memory(a, b)
    assert np.shares_memory(np.array(out, copy=False), a)
    mv = memoryview(out)
    assert mv.shape == (4, 5) and mv.format in ("f", "<f", "=f")
    np.testing.assert_array_equal(a, np.full((4, 5), 4.0))


def test_dlpack_round_trip_without_copy():
    g, x, y, exe = _exe()
    out = exe.run([np.ones((4, 5), np.float32)])[0]
    d = np.from_dlpack(out)
    assert d.ctypes.data == out.data_ptr
    assert np.shares_memory(d, np.asarray(out))
    np.testing.assert_array_equal(d, np.full((4, 5), 4.0))
    assert out.__dlpack_device__()[0] == 1  # kDLCPU
    # numpy -> TensorData through DLPack only (an object with no buffer protocol)
    arr = np.arange(20, dtype=np.float32).reshape(4, 5)

    class OnlyDLPack:
        def __init__(self, a):
            self._a = a

        def __dlpack__(self, *args, **kw):
            return self._a.__dlpack__(*args, **kw)

        def __dlpack_device__(self):
            return self._a.__dlpack_device__()

    td = mg.TensorData(OnlyDLPack(arr))
    assert td.data_ptr == arr.ctypes.data and td.copied is False
    np.testing.assert_array_equal(np.asarray(exe.run([td])[0]), arr.astype(np.float64) * 3 + 1)
    # and the output of one run feeds another without a copy
    out2 = exe.run([out])[0]
    np.testing.assert_array_equal(np.asarray(out2), np.full((4, 5), 13.0))
    np.testing.assert_array_equal(np.asarray(out), np.full((4, 5), 4.0))


def test_dlpack_keeps_output_alive():
    g, x, y, exe = _exe()
    d = np.from_dlpack(exe.run([np.ones((4, 5), np.float32)])[0])  # TensorData dropped at once
    gc.collect()
    for _ in range(6):
        exe.run([np.zeros((4, 5), np.float32)])
    np.testing.assert_array_equal(d, np.full((4, 5), 4.0))


def test_dlpack_of_input_tensordata():
    arr = np.arange(6, dtype=np.int64)
    td = mg.TensorData(arr)
    d = np.from_dlpack(td)
    assert d.ctypes.data == arr.ctypes.data


def test_torch_dlpack_round_trip():
    import torch  # in the test extra
    g, x, y, exe = _exe()
    t = torch.arange(20, dtype=torch.float32).reshape(4, 5)
    td = mg.TensorData(t)
    assert td.data_ptr == t.data_ptr() and not td.copied
    out = exe.run([td])[0]
    back = torch.from_dlpack(out)
    assert back.data_ptr() == out.data_ptr
    assert torch.equal(back, t * 3 + 1)


def test_held_outputs_are_never_overwritten():
    g, x, y, exe = _exe()
    out1 = exe.run([np.ones((4, 5), np.float32)])[0]
    keep = np.asarray(out1).copy()
    outs = [exe.run([np.full((4, 5), float(i), np.float32)])[0] for i in range(10)]  # more than any pool
    np.testing.assert_array_equal(np.asarray(out1), keep)
    for i, o in enumerate(outs):
        np.testing.assert_array_equal(np.asarray(o), np.full((4, 5), 3.0 * i + 1.0))
    assert len({o.data_ptr for o in outs + [out1]}) == 11


def test_held_numpy_view_of_output_is_never_overwritten():
    g, x, y, exe = _exe()
    view = np.asarray(exe.run([np.ones((4, 5), np.float32)])[0])  # only the numpy view is kept
    gc.collect()
    for i in range(8):
        exe.run([np.full((4, 5), 10.0 + i, np.float32)])
    np.testing.assert_array_equal(view, np.full((4, 5), 4.0))
    bview = exe.run([np.ones((4, 5), np.float32)])[0].numpy()
    gc.collect()
    for i in range(8):
        exe.run([np.full((4, 5), 10.0 + i, np.float32)])
    np.testing.assert_array_equal(bview, np.full((4, 5), 4.0))


def test_graph_run_outputs_are_never_overwritten():
    g = mg.Graph()
    x = g.placeholder((3,), F32)
    y = g.negative(x)
    first = g.run({x: np.array([1, 2, 3], np.float32)}, [y])[y]
    for i in range(8):
        g.run({x: np.full(3, float(i), np.float32)}, [y])
    np.testing.assert_array_equal(np.asarray(first), [-1, -2, -3])


def test_run_writes_into_caller_buffers():
    g = mg.Graph()
    x = g.placeholder((4, 5), F32)
    y1 = x * 3.0 + 1.0
    y2 = g.reduction_sum(x, axes=1) if hasattr(g, "reduction_sum") else x - 1.0
    exe = g.compile({x: ((4, 5), F32)}, [y1, y2])
    b1 = np.full((4, 5), np.nan, np.float32)
    b2 = np.full(tuple(d for d in y2.shape), np.nan, np.float32)
    arr = np.arange(20, dtype=np.float32).reshape(4, 5)
    res = exe.run([arr], out=[b1, b2])
    assert res[0].data_ptr == b1.ctypes.data
    assert res[1].data_ptr == b2.ctypes.data
    np.testing.assert_array_equal(b1, arr * 3.0 + 1.0)
    want2 = arr.sum(axis=1, keepdims=True) if hasattr(g, "reduction_sum") else arr - 1.0
    np.testing.assert_array_equal(b2, want2)
    # again into the same buffers, with TensorData out buffers too
    t1 = mg.TensorData(b1)
    res = exe.run([arr * 0], out=[t1, b2])
    assert res[0].data_ptr == b1.ctypes.data
    np.testing.assert_array_equal(b1, np.ones((4, 5)))


def test_run_async_out_buffers():
    g, x, y, exe = _exe()
    buf = np.zeros((4, 5), np.float32)
    fut = exe.run_async([np.ones((4, 5), np.float32)], out=[buf])
    res = fut.result(timeout=60)
    assert res[0].data_ptr == buf.ctypes.data
    np.testing.assert_array_equal(buf, np.full((4, 5), 4.0))


def test_output_target_that_is_a_feed_is_a_copy():
    """A placeholder asked for as a target comes back as its own buffer: writing the result
    must not write the caller's input."""
    g = mg.Graph()
    x = g.placeholder((3,), F32)
    arr = np.array([1, 2, 3], np.float32)
    out = g.run({x: arr}, [x])[x]
    np.testing.assert_array_equal(np.asarray(out), arr)
    assert out.data_ptr != arr.ctypes.data
    np.asarray(out)[0] = 99.0
    assert arr[0] == 1.0


# ---------------- bfloat16 ----------------

def test_bfloat16_round_trip():
    bf = np.dtype(ml_dtypes.bfloat16)
    arr = np.array([[1.5, -2.25, 3.0e38], [0.0, -0.0, 1.0 / 3.0]], dtype=bf)
    g = mg.Graph()
    x = g.placeholder((2, 3), mg.bfloat16)
    y = g.identity(x)
    n = g.negative(x)
    res = g.run({x: arr}, [y, n])
    out = res[y].numpy()
    assert out.dtype == bf
    assert res[y].dtype == mg.bfloat16
    np.testing.assert_array_equal(out.view(np.uint16), arr.view(np.uint16))  # bit exact
    np.testing.assert_array_equal(res[n].numpy().view(np.uint16), (-arr).view(np.uint16))
    # the numpy view is a view of the output buffer
    assert res[y].numpy().ctypes.data == res[y].data_ptr
    # a bfloat16 feed is used in place
    exe = g.compile({x: ((2, 3), mg.bfloat16)}, [n])
    np.testing.assert_array_equal(exe.run([arr])[0].numpy().astype(np.float32), -arr.astype(np.float32))
    arr[0, 0] = 8.0
    np.testing.assert_array_equal(exe.run([arr])[0].numpy().astype(np.float32)[0, 0], -8.0)


def test_bfloat16_constant_and_array_conversion():
    bf = np.dtype(ml_dtypes.bfloat16)
    g = mg.Graph()
    c = g.constant(np.array([1.0, 2.5, -3.0], dtype=bf))
    assert c.dtype == mg.bfloat16
    t = c * c
    out = g.run({}, [t])[t]
    np.testing.assert_array_equal(np.asarray(out.numpy(), dtype=np.float32), [1.0, 6.25, 9.0])
    np.testing.assert_array_equal(np.array(out).astype(np.float32), [1.0, 6.25, 9.0])
