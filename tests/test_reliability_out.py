"""out= is never silently wrong (issue 13, item 2). A buffer that would need a hidden copy
(not C-contiguous, misaligned), is read-only (immutable bytes included), has the wrong shape
or dtype, is listed twice or shares memory with an input, a variable or another out buffer
is refused with a GraphValueError naming run; a valid one is written in place."""
import numpy as np
import pytest

import mpsgraph as mg


def _exe(shape=(4, 5)):
    g = mg.Graph()
    x = g.placeholder(shape, mg.float32, name="x")
    y = x * 2.0
    z = x + 1.0
    return g, x, g.compile({x: (shape, mg.float32)}, [y, z])


def _x(shape=(4, 5)):
    return np.arange(np.prod(shape), dtype=np.float32).reshape(shape)


def test_valid_out_is_written_in_place():
    _, _, exe = _exe()
    a, b = np.empty((4, 5), np.float32), np.empty((4, 5), np.float32)
    outs = exe.run([_x()], out=[a, b])
    np.testing.assert_array_equal(a, _x() * 2)
    np.testing.assert_array_equal(b, _x() + 1)
    assert outs[0].data_ptr == a.ctypes.data and outs[1].data_ptr == b.ctypes.data


def test_valid_out_through_tensordata_bytearray_and_dlpack():
    _, _, exe = _exe((2, 2))
    a = mg.TensorData.empty((2, 2), mg.float32)
    raw = bytearray(16)
    b = np.frombuffer(raw, np.float32).reshape(2, 2)
    exe.run([_x((2, 2))], out=[a, b])
    np.testing.assert_array_equal(np.asarray(a), _x((2, 2)) * 2)
    np.testing.assert_array_equal(np.frombuffer(raw, np.float32).reshape(2, 2), _x((2, 2)) + 1)


def test_non_contiguous_out_is_refused():
    _, _, exe = _exe()
    big = np.zeros((4, 10), np.float32)
    strided = big[:, ::2]
    before = big.copy()
    with pytest.raises(mg.GraphValueError, match=r"\[run\].*not C-contiguous"):
        exe.run([_x()], out=[strided, np.empty((4, 5), np.float32)])
    np.testing.assert_array_equal(big, before)
    with pytest.raises(mg.GraphValueError, match=r"\[run\].*not C-contiguous"):
        exe.run([_x()], out=[np.zeros((5, 4), np.float32).T, np.empty((4, 5), np.float32)])


def test_misaligned_out_is_refused():
    _, _, exe = _exe((2, 2))
    raw = np.zeros(17, np.uint8)
    mis = raw[1:].view(np.float32).reshape(2, 2)
    assert mis.ctypes.data % 4 != 0
    with pytest.raises(mg.GraphValueError, match=r"\[run\].*aligned"):
        exe.run([_x((2, 2))], out=[mis, np.empty((2, 2), np.float32)])


def test_read_only_out_is_refused():
    _, _, exe = _exe((2, 2))
    ro = np.zeros((2, 2), np.float32)
    ro.flags.writeable = False
    with pytest.raises(mg.GraphValueError, match=r"\[run\].*read-only"):
        exe.run([_x((2, 2))], out=[ro, np.empty((2, 2), np.float32)])
    assert not ro.any()
    immutable = bytes(16)
    with pytest.raises(mg.GraphValueError, match=r"\[run\].*read-only"):
        exe.run([_x((2, 2))], out=[memoryview(immutable).cast("f", (2, 2)), np.empty((2, 2), np.float32)])
    assert immutable == bytes(16)
    td = mg.TensorData(memoryview(immutable).cast("f", (2, 2)))
    assert td.readonly
    with pytest.raises(mg.GraphValueError, match=r"\[run\].*read-only"):
        exe.run([_x((2, 2))], out=[td, np.empty((2, 2), np.float32)])
    assert immutable == bytes(16)


def test_wrong_shape_or_dtype_out_is_refused():
    _, _, exe = _exe((2, 2))
    with pytest.raises(mg.GraphValueError, match=r"\[run\].*out buffer 0"):
        exe.run([_x((2, 2))], out=[np.empty((2, 3), np.float32), np.empty((2, 2), np.float32)])
    with pytest.raises(mg.GraphValueError, match=r"\[run\].*out buffer 1"):
        exe.run([_x((2, 2))], out=[np.empty((2, 2), np.float32), np.empty((2, 2), np.float64)])
    with pytest.raises(mg.GraphValueError, match=r"\[run\].*2 buffers"):
        exe.run([_x((2, 2))], out=[np.empty((2, 2), np.float32)])
    with pytest.raises(mg.GraphTypeError, match=r"\[run\].*list"):
        exe.run([_x((2, 2))], out=np.empty((2, 2), np.float32))
    with pytest.raises(mg.GraphTypeError, match=r"\[run\]"):
        exe.run([_x((2, 2))], out=[[0.0, 0.0], np.empty((2, 2), np.float32)])


def test_out_listed_twice_is_refused():
    _, _, exe = _exe((2, 2))
    a = np.empty((2, 2), np.float32)
    with pytest.raises(mg.GraphValueError, match=r"\[run\].*out buffer 1.*out buffer 0"):
        exe.run([_x((2, 2))], out=[a, a])


def test_out_overlapping_another_out_is_refused():
    _, _, exe = _exe((2, 2))
    base = np.zeros(6, np.float32)
    with pytest.raises(mg.GraphValueError, match=r"shares memory with out buffer 0"):
        exe.run([_x((2, 2))], out=[base[:4].reshape(2, 2), base[2:].reshape(2, 2)])


def test_out_overlapping_an_input_is_refused():
    _, _, exe = _exe((2, 2))
    x = _x((2, 2))
    with pytest.raises(mg.GraphValueError, match=r"shares memory with input 0 \('x'\)"):
        exe.run([x], out=[x, np.empty((2, 2), np.float32)])
    np.testing.assert_array_equal(x, _x((2, 2)))


def test_out_overlapping_a_variable_is_refused():
    g = mg.Graph()
    v = g.variable(np.zeros((2, 2), np.float32), name="v")
    y = v + 1.0
    exe = g.compile({}, [y])
    with pytest.raises(mg.GraphValueError, match=r"shares memory with variable"):
        exe.run([], out=[v.value])
    np.testing.assert_array_equal(np.asarray(v.value), np.zeros((2, 2), np.float32))


def test_out_for_a_target_that_is_a_feed_or_a_view():
    g = mg.Graph()
    x = g.placeholder((2, 3), mg.float32, name="x")
    r = g.reshape(x, (3, 2))
    exe = g.compile({x: ((2, 3), mg.float32)}, [x, r])
    a, b = np.empty((2, 3), np.float32), np.empty((3, 2), np.float32)
    exe.run([_x((2, 3))], out=[a, b])
    np.testing.assert_array_equal(a, _x((2, 3)))
    np.testing.assert_array_equal(b, _x((2, 3)).reshape(3, 2))


def test_zero_size_out_buffers_never_overlap():
    g = mg.Graph()
    x = g.placeholder((0, 3), mg.float32, name="x")
    exe = g.compile({x: ((0, 3), mg.float32)}, [x * 2.0, x + 1.0])
    e = np.empty((0, 3), np.float32)
    outs = exe.run([e], out=[e, e])
    assert outs[0].shape == (0, 3)


def test_run_async_out_is_checked_too():
    _, _, exe = _exe((2, 2))
    a = np.empty((2, 2), np.float32)
    with pytest.raises(mg.GraphValueError, match=r"out buffer 0"):
        exe.run_async([_x((2, 2))], out=[a, a]).result()
