"""Checked size arithmetic (issue 13, item 1) and the unclear errors of item 7: absurd shapes
are refused where the node, the TensorData or the compiled feed type is made, with a
GraphValueError naming the op and the shape; never a wrapped count and an out-of-bounds kernel."""
import numpy as np
import pytest

import mpsgraph as mg

HUGE = 2**62 + 1


def _graph():
    g = mg.Graph()
    return g, g.placeholder((None, 4), mg.float32, name="x")


@pytest.mark.parametrize("shape", [(HUGE, 4), (2**31, 2**31, 4), (2**40, 2**40), (0, 2**62, 2**62)])
def test_absurd_placeholder_shape_is_refused(shape):
    g = mg.Graph()
    with pytest.raises(mg.GraphValueError, match=r"\[placeholder\].*too large") as e:
        g.placeholder(shape, mg.float32, name="p")
    assert str(shape[0]) in str(e.value)
    assert g.num_nodes == 0  # the graph is unchanged


def test_dim_beyond_int64_is_refused():
    g = mg.Graph()
    with pytest.raises(mg.GraphValueError, match=r"\[placeholder\]"):
        g.placeholder((2**70, 2), mg.float32)
    with pytest.raises(mg.GraphValueError, match=r"\[TensorData\].*out of range"):
        mg.TensorData.empty((2**64,), mg.float32)


@pytest.mark.parametrize("dim", [-7, -2, -(2**40)])
def test_negative_dim_is_refused_everywhere(dim):
    g = mg.Graph()
    with pytest.raises(mg.GraphValueError, match=r"\[placeholder\].*" + str(dim)):
        g.placeholder((3, dim), mg.float32)
    with pytest.raises(mg.GraphValueError, match=r"\[TensorData\].*" + str(dim)):
        mg.TensorData.empty((3, dim), mg.float32)
    x = g.placeholder((None, 2), mg.float32, name="x")
    with pytest.raises(mg.GraphValueError, match=r"\[placeholder\].*" + str(dim)):
        g.compile({x: ((dim, 2), mg.float32)}, [x + 1.0])


def test_unknown_dim_in_a_concrete_shape_is_refused():
    with pytest.raises(mg.GraphValueError, match=r"\[TensorData\].*unknown"):
        mg.TensorData.empty((None, 3), mg.float32)


def test_absurd_tensordata_is_refused_before_allocating():
    with pytest.raises(mg.GraphValueError, match=r"\[TensorData\].*too large"):
        mg.TensorData.empty((HUGE, 4), mg.float32)
    with pytest.raises(mg.GraphValueError, match=r"\[TensorData\].*too large"):
        mg.TensorData.empty((2**61, 2), mg.float64)


def test_absurd_compiled_feed_type_is_refused():
    g, x = _graph()
    y = g.reduction_sum(x * 2.0, axes=1)
    with pytest.raises(mg.GraphValueError, match=r"\[placeholder\].*too large.*'x'"):
        g.compile({x: ((HUGE, 4), mg.float32)}, [y])
    # the graph still works afterwards
    out = g.run({x: np.ones((2, 4), np.float32)}, [y])[y]
    np.testing.assert_array_equal(np.asarray(out), np.full((2, 1), 8.0, np.float32))


@pytest.mark.parametrize("build", [
    lambda g, x: g.broadcast_to(x, (2**40, 2**40, 4)),
    lambda g, x: g.tile(x, (2**62, 1)),
    lambda g, x: g.reshape(x, (2**40, 2**40, 4)),
])
def test_ops_whose_output_would_be_absurd_are_refused(build):
    g = mg.Graph()
    x = g.placeholder((2, 4), mg.float32, name="x")
    n = g.num_nodes
    with pytest.raises(mg.GraphValueError) as e:
        build(g, x)
    assert str(e.value).startswith("[")
    assert g.num_nodes == n  # nothing half-built was left behind


def test_absurd_shape_known_only_at_run_is_refused_at_specialisation():
    g = mg.Graph()
    a = g.placeholder((None, 1), mg.float32, name="a")
    b = g.placeholder((1, None), mg.float32, name="b")
    y = a + b
    exe = g.compile({a: ((None, 1), mg.float32), b: ((1, None), mg.float32)}, [y])
    # (2**33, 1) + (1, 2**33) has 2**66 elements: refused when specialised for those types
    with pytest.raises(mg.GraphValueError, match="too large"):
        g.compile({a: ((2**33, 1), mg.float32), b: ((1, 2**33), mg.float32)}, [y])
    out = exe.run([np.ones((2, 1), np.float32), np.ones((1, 3), np.float32)])[0]
    np.testing.assert_array_equal(np.asarray(out), np.full((2, 3), 2.0, np.float32))


def test_zero_size_tensors_are_fine():
    g = mg.Graph()
    x = g.placeholder((0, 2**40), mg.float32, name="x")  # 0 elements, but 2**40 * 4 bytes per row
    assert x.shape == (0, 2**40)
    td = mg.TensorData.empty((0, 5), mg.int32)
    assert td.nbytes == 0 and td.shape == (0, 5)


# ---------------- item 7: unclear errors made clear ----------------

def test_swapped_shape_and_dtype_in_placeholder():
    g = mg.Graph()
    with pytest.raises(mg.GraphTypeError, match=r"\[placeholder\].*\(shape, dtype\)"):
        g.placeholder(mg.float32, (2, 3))
    with pytest.raises(mg.GraphTypeError, match=r"\[placeholder\].*\(shape, dtype\)"):
        g.placeholder("float32", [2, 3])


def test_swapped_shape_and_dtype_in_compile():
    g, x = _graph()
    y = x * 2.0
    with pytest.raises(mg.GraphTypeError, match=r"\[compile\].*\(shape, dtype\)"):
        g.compile({x: (mg.float32, (2, 4))}, [y])
    with pytest.raises(mg.GraphTypeError, match=r"\[compile\]"):
        g.compile({x: mg.float32}, [y])


def test_run_with_an_array_instead_of_a_list():
    g = mg.Graph()
    a = g.placeholder((2,), mg.float32, name="a")
    b = g.placeholder((2,), mg.float32, name="b")
    exe = g.compile({a: ((2,), mg.float32), b: ((2,), mg.float32)}, [a + b])
    arr = np.ones((2, 2), np.float32)  # two rows: would silently be taken as two inputs
    with pytest.raises(mg.GraphTypeError, match=r"\[run\].*list"):
        exe.run(arr)
    with pytest.raises(mg.GraphTypeError, match=r"\[run\].*list"):
        exe.run(mg.TensorData(arr))
    with pytest.raises(mg.GraphTypeError, match=r"\[run\].*dict"):
        g.run([arr, arr], [a + b])


@pytest.mark.parametrize("cap", [-1, -100, 0])
def test_cache_capacity_below_one(cap):
    g, _ = _graph()
    with pytest.raises(mg.GraphValueError, match=r"\[set_cache_capacity\].*" + str(cap)):
        g.set_cache_capacity(cap)
    with pytest.raises(mg.GraphTypeError, match=r"\[set_cache_capacity\]"):
        g.set_cache_capacity(2.5)
    g.set_cache_capacity(3)
    assert g.cache_info().capacity == 3


def test_out_of_range_python_int_constant():
    g = mg.Graph()
    with pytest.raises(mg.GraphValueError, match=r"\[constant\].*int32"):
        g.constant(2**40)  # Python ints default to int32: refused rather than wrapped to 0
    with pytest.raises(mg.GraphValueError, match=r"\[constant\]"):
        g.constant(2**70)
    with pytest.raises(mg.GraphValueError, match=r"\[constant\]"):
        g.constant(2**40, dtype=mg.int32)
    with pytest.raises(mg.GraphValueError, match=r"\[constant\]"):
        g.constant(-1, dtype=mg.uint8)
    with pytest.raises(mg.GraphValueError, match=r"\[variable\].*int32"):
        g.variable([1, 2**35])
    c = g.constant(2**40, dtype=mg.int64)
    assert int(np.asarray(g.run({}, [c])[c])) == 2**40


def test_float_feeds_to_integer_placeholders_follow_the_operand_rule():
    g = mg.Graph()
    x = g.placeholder((2,), mg.int32, name="x")
    y = x + 1
    with pytest.raises(mg.GraphTypeError, match=r"\[run\].*float.*int32"):
        g.run({x: [1.5, 2.0]}, [y])
    with pytest.raises(mg.GraphTypeError, match=r"\[run\].*float"):
        g.run({x: [float("nan"), 1.0]}, [y])
    # integral Python floats are exact and allowed, as for scalars next to integer tensors
    np.testing.assert_array_equal(np.asarray(g.run({x: [1.0, 2.0]}, [y])[y]), [2, 3])
    # a float array is a dtype mismatch, named as such
    with pytest.raises(mg.GraphValueError, match=r"float32.*int32|int32.*float32"):
        g.run({x: np.array([1.5, 2.5], np.float32)}, [y])
    with pytest.raises(mg.GraphTypeError, match=r"\[constant\].*float"):
        g.constant([0.5], dtype=mg.int8)


def test_bad_dims_in_shapes_name_the_op():
    with pytest.raises(mg.GraphTypeError, match=r"\[TensorData\].*ints"):
        mg.TensorData.empty((2.5, 3), mg.float32)
    with pytest.raises(mg.GraphTypeError, match=r"\[TensorData\].*sequence"):
        mg.TensorData.empty(3, mg.float32)
    with pytest.raises(mg.GraphTypeError, match=r"\[dtype\]"):
        mg.TensorData.empty((3,), object())
    g = mg.Graph()
    with pytest.raises(mg.GraphTypeError, match=r"\[placeholder\]"):
        g.placeholder((2.5, 3), mg.float32)
