"""Bad input never crashes and never corrupts a graph (ARCHITECTURE.md section 7).

Each case asserts the exception class (an mg.GraphError that is also a ValueError /
TypeError / IndexError), that the message names the op in brackets, the offending shapes or
dtypes (and the node name where one was given), and that the same graph afterwards still
builds and runs a correct computation (checked against numpy)."""
import numpy as np
import pytest

import mpsgraph as mg

F32 = mg.float32


class Healthy:
    """A graph with a working computation; after a failure, check() proves it still works."""

    def __init__(self):
        self.g = mg.Graph()
        self.x = self.g.placeholder((2, 3), F32, name="x_in")
        self.xi = self.g.placeholder((2, 3), mg.int32, name="xi_in")
        self.y = self.g.exponent(self.x) * 2.0 + 1.0
        self.fx = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
        self.fi = np.arange(6, dtype=np.int32).reshape(2, 3)

    def check(self):
        g = self.g
        # the computation built before the error still runs correctly
        out = g.run({self.x: self.fx}, [self.y])[self.y]
        np.testing.assert_allclose(np.asarray(out), np.exp(self.fx.astype(np.float64)) * 2 + 1, rtol=1e-6)
        # and a new one can be built and run on the same graph
        z = g.reduction_sum(self.x * self.x, axes=1) if hasattr(g, "reduction_sum") else self.x * self.x
        w = self.xi + 7
        res = g.run({self.x: self.fx, self.xi: self.fi}, [z, w])
        want = (self.fx.astype(np.float64) ** 2).sum(axis=1, keepdims=True) if hasattr(g, "reduction_sum") \
            else self.fx.astype(np.float64) ** 2
        np.testing.assert_allclose(np.asarray(res[z]), want, rtol=1e-6)
        np.testing.assert_array_equal(np.asarray(res[w]), self.fi + 7)


@pytest.fixture
def h():
    return Healthy()


def expect(h, exc, fn, *fragments, op=None, node=None, same_nodes=True):
    """fn() must raise exc (an mg.GraphError) whose message holds '[op]', the fragments and
    the node name; the graph must be unchanged (same_nodes) and still work."""
    n0 = h.g.num_nodes
    with pytest.raises(exc) as ei:
        fn()
    e = ei.value
    msg = str(e)
    assert isinstance(e, mg.GraphError), f"{type(e).__name__} is not an mg.GraphError: {msg}"
    if op is not None:
        ops = op if isinstance(op, tuple) else (op,)
        assert any(f"[{o}]" in msg for o in ops), f"message does not name the op {ops}: {msg}"
    for f in fragments:
        assert f in msg, f"message does not mention {f!r}: {msg}"
    if node is not None:
        assert node in msg, f"message does not name the node {node!r}: {msg}"
    if same_nodes:
        assert h.g.num_nodes == n0, "a failed build left nodes behind"
    h.check()
    return msg


# ---------------- dtype and shape mismatches at build time ----------------

def test_binary_dtype_mismatch(h):
    msg = expect(h, mg.GraphTypeError, lambda: h.g.addition(h.x, h.xi, name="bad_add"), "float32", "int32",
                 "(2, 3)", op="addition", node="bad_add")
    assert "cast" in msg  # suggests the fix
    assert issubclass(mg.GraphTypeError, TypeError)


def test_comparison_dtype_mismatch(h):
    a = h.g.placeholder((3,), mg.float16, name="a16")
    expect(h, TypeError, lambda: h.g.less_than(a, h.g.placeholder((3,), F32), name="cmp"), "float16", "float32",
           op="less_than", node="cmp", same_nodes=False)


def test_operator_dtype_mismatch(h):
    a = h.g.placeholder((4,), mg.int8)
    b = h.g.placeholder((4,), mg.uint8)
    expect(h, mg.GraphTypeError, lambda: a * b, "int8", "uint8", "(4,)", op="multiplication")


def test_shapes_do_not_broadcast(h):
    b = h.g.placeholder((4,), F32, name="b4")
    msg = expect(h, mg.GraphValueError, lambda: h.g.multiplication(h.x, b, name="mul_bad"), "(2, 3)", "(4,)",
                 op="multiplication", node="mul_bad")
    assert "broadcast" in msg


def test_select_shapes_do_not_broadcast(h):
    p = h.g.placeholder((5,), mg.bool_)
    expect(h, ValueError, lambda: h.g.select(p, h.x, h.x), "(5,)", "(2, 3)", op="select")


def test_select_branch_dtypes_differ(h):
    p = h.g.placeholder((2, 3), mg.bool_)
    expect(h, TypeError, lambda: h.g.select(p, h.x, h.xi), "float32", "int32", op="select")


def test_clamp_dtype_mismatch(h):
    lo = h.g.placeholder((), mg.float64)
    expect(h, TypeError, lambda: h.g.clamp(h.x, lo, lo), "float32", "float64", op="clamp")


def test_float_only_op_on_ints(h):
    expect(h, mg.GraphTypeError, lambda: h.g.exponent(h.xi, name="exp_int"), "int32", op="exponent", node="exp_int")


def test_float_only_binary_on_ints(h):
    expect(h, mg.GraphTypeError, lambda: h.g.atan2(h.xi, h.xi), "int32", op="atan2")


def test_bool_op_on_floats(h):
    expect(h, mg.GraphTypeError, lambda: h.g.logical_and(h.x, h.x, name="land"), "float32", op="logical_and",
           node="land")


def test_logical_not_on_ints(h):
    expect(h, mg.GraphTypeError, lambda: h.g.logical_not(h.xi), "int32", op="logical_not")


def test_bitwise_op_on_floats(h):
    expect(h, mg.GraphTypeError, lambda: h.g.bitwise_xor(h.x, h.x), "float32", op="bitwise_xor")


def test_shift_on_bool(h):
    b = h.g.placeholder((3,), mg.bool_)
    expect(h, mg.GraphTypeError, lambda: h.g.bitwise_left_shift(b, b), "bool", op="bitwise_left_shift")


def test_arithmetic_on_bool(h):
    b = h.g.placeholder((3,), mg.bool_)
    expect(h, mg.GraphTypeError, lambda: h.g.addition(b, b), "bool", op="addition")


def test_python_float_into_int_tensor_op(h):
    expect(h, mg.GraphTypeError, lambda: h.xi + 2.5, "2.5", "int32", op="addition")


def test_python_int_out_of_range_for_int8(h):
    a = h.g.placeholder((3,), mg.int8)
    expect(h, mg.GraphValueError, lambda: a + 300, "300", "int8", op="addition")
    expect(h, mg.GraphValueError, lambda: h.g.multiplication(a, -129), "-129", "int8", op="multiplication")


def test_negative_python_int_for_unsigned(h):
    a = h.g.placeholder((3,), mg.uint16)
    expect(h, mg.GraphValueError, lambda: a - (-1), "-1", "uint16", op="subtraction")


def test_tensor_of_another_graph(h):
    other = mg.Graph()
    t = other.placeholder((2, 3), F32, name="foreign")
    expect(h, mg.GraphValueError, lambda: h.g.addition(h.x, t), "foreign", "another graph", op="addition")
    expect(h, mg.GraphValueError, lambda: h.x + t, "another graph", op="addition")


def test_input_not_a_tensor(h):
    expect(h, mg.GraphTypeError, lambda: h.g.exponent(None), op="exponent")


def test_bad_attribute_kind(h):
    expect(h, mg.GraphTypeError, lambda: h.g.cast(h.x, dtype=5.5), "dtype", op="cast")


def test_unknown_dtype_name(h):
    expect(h, mg.GraphTypeError, lambda: h.g.cast(h.x, dtype="float128"), "float128", op="cast")


def test_unknown_attribute(h):
    expect(h, mg.GraphTypeError, lambda: h.g.cast(h.x, dtype="int32", rounding="up"), "rounding", op="cast")


def test_unknown_attribute_low_level(h):
    ref = [(h.x.node, h.x.index)]
    expect(h, mg.GraphValueError, lambda: h.g._g.add_op("exponent", ref, {"base": 2.0}, "lowlevel"), "base",
           op="exponent", node="lowlevel")


def test_wrong_number_of_inputs(h):
    expect(h, mg.GraphTypeError, lambda: h.g.addition(h.x), op="addition")


def test_unranked_placeholder(h):
    expect(h, mg.GraphValueError, lambda: h.g.placeholder(None, F32), op="placeholder")


def test_placeholder_negative_dim(h):
    expect(h, mg.GraphValueError, lambda: h.g.placeholder((2, -5), F32, name="neg"), "-5", op="placeholder", node="neg")


def test_placeholder_unknown_dtype(h):
    expect(h, mg.GraphTypeError, lambda: h.g.placeholder((2,), "complex32", name="cplx"), "complex32",
           op="placeholder")


# ---------------- op attributes (reductions, matmul, shape ops) ----------------

def test_reduction_axis_out_of_range(h):
    expect(h, mg.GraphIndexError, lambda: h.g.reduction_sum(h.x, axes=2, name="rs"), "2", "rank 2", "(2, 3)",
           op="reduction_sum", node="rs")
    assert issubclass(mg.GraphIndexError, IndexError)


def test_reduction_negative_axis_out_of_range(h):
    expect(h, IndexError, lambda: h.g.reduction_maximum(h.x, axes=-3), "-3", "(2, 3)", op="reduction_maximum")


def test_reduction_repeated_axes(h):
    expect(h, mg.GraphValueError, lambda: h.g.reduction_sum(h.x, axes=(1, -1)), "repeated", op="reduction_sum")


def test_reduction_axes_bad_kind(h):
    expect(h, mg.GraphTypeError, lambda: h.g.reduction_sum(h.x, axes="rows"), "axes", op="reduction_sum")


def test_argmax_axis_out_of_range(h):
    expect(h, IndexError, lambda: h.g.reduction_arg_maximum(h.x, axis=5), "5", "(2, 3)", op="reduction_arg_maximum")


def test_zero_size_reduction_without_identity(h):
    e = h.g.placeholder((0, 3), F32, name="empty")
    expect(h, mg.GraphValueError, lambda: h.g.reduction_maximum(e, axes=0, name="maxe"), "(0, 3)",
           op="reduction_maximum", node="maxe")


def test_zero_size_reduction_without_identity_known_at_run(h):
    e = h.g.placeholder((None, 3), F32, name="maybe_empty")
    m = h.g.reduction_minimum(e, axes=0, name="mine")
    # fine for a non-empty feed
    r = h.g.run({e: np.array([[3, 1, 2], [0, 5, -1]], np.float32)}, [m])[m]
    np.testing.assert_array_equal(np.asarray(r), [[0, 1, -1]])
    expect(h, mg.GraphValueError, lambda: h.g.run({e: np.zeros((0, 3), np.float32)}, [m]), "(0, 3)",
           op="reduction_minimum", node="mine")


def test_reduction_sum_on_bool(h):
    b = h.g.placeholder((3,), mg.bool_)
    expect(h, mg.GraphTypeError, lambda: h.g.reduction_sum(b), "bool", op="reduction_sum")


def test_matmul_inner_dim_mismatch(h):
    b = h.g.placeholder((4, 5), F32)
    expect(h, mg.GraphValueError, lambda: h.g.matrix_multiplication(h.x, b, name="mm"), "(2, 3)", "(4, 5)",
           op="matrix_multiplication", node="mm")
    expect(h, mg.GraphValueError, lambda: h.x @ b, "(2, 3)", "(4, 5)", op="matrix_multiplication")


def test_matmul_batch_mismatch(h):
    a = h.g.placeholder((2, 2, 3), F32)
    b = h.g.placeholder((3, 3, 4), F32)
    expect(h, mg.GraphValueError, lambda: a @ b, "(2, 2, 3)", "(3, 3, 4)", op="matrix_multiplication")


def test_matmul_rank0(h):
    s = h.g.placeholder((), F32)
    expect(h, mg.GraphValueError, lambda: h.g.matrix_multiplication(s, h.x), "()", op="matrix_multiplication")


def test_matmul_dtype_mismatch(h):
    b = h.g.placeholder((3, 2), mg.float16)
    expect(h, mg.GraphTypeError, lambda: h.x @ b, "float32", "float16", op="matrix_multiplication")


def test_matmul_inner_dim_mismatch_known_at_run(h):
    b = h.g.placeholder((None, 2), F32, name="bdyn")
    y = h.g.matrix_multiplication(h.x, b, name="mmdyn")
    r = h.g.run({h.x: h.fx, b: np.ones((3, 2), np.float32)}, [y])[y]
    np.testing.assert_allclose(np.asarray(r), h.fx.astype(np.float64) @ np.ones((3, 2)), rtol=1e-6)
    expect(h, mg.GraphValueError, lambda: h.g.run({h.x: h.fx, b: np.ones((4, 2), np.float32)}, [y]), "(4, 2)",
           op="matrix_multiplication", node="mmdyn")


def test_reshape_size_mismatch(h):
    expect(h, mg.GraphValueError, lambda: h.g.reshape(h.x, shape=(4, 2), name="rsh"), "(2, 3)", "(4, 2)",
           op="reshape", node="rsh")


def test_reshape_two_unknown_dims(h):
    expect(h, mg.GraphValueError, lambda: h.g.reshape(h.x, shape=(-1, -1)), op="reshape")


def test_reshape_mismatch_known_at_run(h):
    p = h.g.placeholder((None, 3), F32)
    y = h.g.reshape(p, shape=(2, -1), name="rdyn")
    expect(h, mg.GraphValueError, lambda: h.g.run({p: np.zeros((3, 3), np.float32)}, [y]), "(3, 3)",
           op="reshape", node="rdyn")


def test_transpose_not_a_permutation(h):
    expect(h, mg.GraphValueError, lambda: h.g.transpose(h.x, permutation=(0, 0)), "(0, 0)", op="transpose")
    expect(h, mg.GraphValueError, lambda: h.g.transpose(h.x, permutation=(1, 0, 2)), op="transpose")


def test_squeeze_non_unit_dim(h):
    expect(h, mg.GraphValueError, lambda: h.g.squeeze(h.x, axes=0, name="sq"), "(2, 3)", op="squeeze", node="sq")


def test_expand_dims_axis_out_of_range(h):
    expect(h, IndexError, lambda: h.g.expand_dims(h.x, axes=4), "4", op="expand_dims")


def test_broadcast_to_incompatible(h):
    expect(h, mg.GraphValueError, lambda: h.g.broadcast_to(h.x, shape=(4, 3)), "(2, 3)", "(4, 3)",
           op="broadcast_to")


def test_split_does_not_divide(h):
    p = h.g.placeholder((5, 4), F32)
    expect(h, mg.GraphValueError, lambda: h.g.split(p, num_splits=2, axis=0, name="spl"), "5", op="split", node="spl")


def test_split_sizes_do_not_sum(h):
    expect(h, mg.GraphValueError, lambda: h.g.split(h.x, split_sizes=(1, 1), axis=1), "(2, 3)", op="split")


def test_concat_rank_mismatch(h):
    b = h.g.placeholder((3,), F32)
    expect(h, mg.GraphValueError, lambda: h.g.concat([h.x, b], axis=0), "(2, 3)", "(3,)", op="concat")


def test_concat_dtype_mismatch(h):
    expect(h, mg.GraphTypeError, lambda: h.g.concat([h.x, h.xi], axis=0), "float32", "int32", op="concat")


def test_concat_other_dim_mismatch(h):
    b = h.g.placeholder((2, 4), F32)
    expect(h, mg.GraphValueError, lambda: h.g.concat([h.x, b], axis=0), "(2, 3)", "(2, 4)", op="concat")


def test_concat_axis_out_of_range(h):
    expect(h, IndexError, lambda: h.g.concat([h.x, h.x], axis=2), "2", op="concat")


def test_stack_shape_mismatch(h):
    b = h.g.placeholder((3, 2), F32)
    expect(h, mg.GraphValueError, lambda: h.g.stack([h.x, b], axis=0), "(2, 3)", "(3, 2)", op="stack")


def test_pad_negative(h):
    expect(h, mg.GraphValueError, lambda: h.g.pad(h.x, left_padding=(0, -1), right_padding=(0, 0)), "-1", op="pad")


def test_pad_wrong_length(h):
    expect(h, mg.GraphValueError, lambda: h.g.pad(h.x, left_padding=(1,), right_padding=(1,)), "(2, 3)", op="pad")


def test_tile_wrong_length(h):
    expect(h, mg.GraphValueError, lambda: h.g.tile(h.x, multiples=(2,)), "(2, 3)", op="tile")


def test_slice_out_of_range(h):
    expect(h, (IndexError, ValueError), lambda: h.g.slice(h.x, axis=1, start=2, length=5), "(2, 3)", op="slice")


def test_strided_slice_index_out_of_range(h):
    # a squeezed (indexed) dim needs its index in range
    expect(h, mg.GraphIndexError,
           lambda: h.g.strided_slice(h.x, starts=(5, 0), ends=(6, 3), strides=(1, 1), squeeze_mask=1, name="ss"),
           "5", "size 2", op="strided_slice", node="ss")


def test_strided_slice_zero_stride(h):
    expect(h, mg.GraphValueError, lambda: h.g.strided_slice(h.x, starts=(0, 0), ends=(2, 3), strides=(1, 0)),
           op="strided_slice")


def test_getitem_index_out_of_range(h):
    msg = expect(h, mg.GraphIndexError, lambda: h.x[2], "index 2", "size 2", same_nodes=True)
    assert msg.startswith("[")
    expect(h, mg.GraphIndexError, lambda: h.x[:, -4], "-4", "size 3")


def test_getitem_too_many_indices(h):
    expect(h, mg.GraphIndexError, lambda: h.x[0, 0, 0], "rank 2", "3")


def test_getitem_bad_index_type(h):
    expect(h, mg.GraphTypeError, lambda: h.x["a"], "str")


def test_creation_bad_arguments(h):
    expect(h, mg.GraphValueError, lambda: h.g.arange(0, 5, 0, mg.int32), op="arange")
    expect(h, mg.GraphValueError, lambda: h.g.eye(-1, dtype=F32), "-1", op="eye")
    expect(h, mg.GraphValueError, lambda: h.g.full((3, -1), 1.0, F32), op="full")


def test_creation_negative_dim_is_named_in_the_message(h):
    # BUG (shape_str prints every negative dim as None): the message must show the -3 the caller gave
    expect(h, mg.GraphValueError, lambda: h.g.zeros((2, -3), F32), "-3", op="zeros")


# ---------------- running: feeds, devices, targets ----------------

def test_missing_feed(h):
    expect(h, mg.GraphValueError, lambda: h.g.run({}, [h.y]), "x_in", "float32(2, 3)", op="run")


def test_feed_wrong_shape(h):
    expect(h, mg.GraphValueError, lambda: h.g.run({h.x: np.zeros((3, 3), np.float32)}, [h.y]),
           "float32(3, 3)", "float32(2, 3)", op="placeholder", node="x_in")


def test_feed_wrong_dtype(h):
    expect(h, mg.GraphValueError, lambda: h.g.run({h.x: h.fx.astype(np.float64)}, [h.y]),
           "float64(2, 3)", "float32(2, 3)", op="placeholder", node="x_in")


def test_feed_wrong_rank(h):
    expect(h, mg.GraphValueError, lambda: h.g.run({h.x: np.zeros((6,), np.float32)}, [h.y]),
           "float32(6,)", "float32(2, 3)", op="placeholder", node="x_in")


def test_feed_wrong_rank_for_none_dims(h):
    p = h.g.placeholder((None, None), F32, name="pdyn")
    y = p * 2.0
    expect(h, mg.GraphValueError, lambda: h.g.run({p: np.zeros((2, 2, 2), np.float32)}, [y]),
           "(2, 2, 2)", "(None, None)", op="placeholder", node="pdyn")


# BUG (cpp/bindings/module.cpp to_tensor_data/from_buffer): data that cannot become a
# TensorData raises a plain TypeError (py::type_error), not an mg.GraphTypeError.
def test_feed_unsupported_object(h):
    expect(h, mg.GraphTypeError, lambda: h.g.run({h.x: object()}, [h.y]), "object")


def test_feed_complex_array(h):
    # complex64 is a dtype now: feeding it to a float32 placeholder is a feed of the wrong type
    expect(h, mg.GraphValueError, lambda: h.g.run({h.x: np.zeros((2, 3), np.complex64)}, [h.y]), "complex64",
           "float32", op="placeholder")


def test_feed_key_not_a_tensor(h):
    expect(h, mg.GraphTypeError, lambda: h.g.run({"x_in": h.fx}, [h.y]), "str", op="run")


def test_target_not_a_tensor(h):
    expect(h, mg.GraphTypeError, lambda: h.g.run({h.x: h.fx}, ["y"]), op="run")


def test_target_of_another_graph(h):
    other = mg.Graph()
    t = other.placeholder((1,), F32, name="foreign_target")
    expect(h, mg.GraphValueError, lambda: h.g.run({h.x: h.fx}, [t]), "foreign_target", op="run")


def test_feeding_a_non_placeholder(h):
    expect(h, mg.GraphValueError, lambda: h.g.run({h.y: h.fx}, [h.y]), "placeholder", h.y.name, op=("run", "compile"))


def test_feeding_a_variable(h):
    v = h.g.variable(np.zeros(3, np.float32), name="var0")
    expect(h, mg.GraphValueError, lambda: h.g.run({v: np.ones(3, np.float32)}, [v]), "var0", op=("run", "compile"),
           same_nodes=True)


def test_unknown_device_string(h):
    expect(h, mg.GraphValueError, lambda: h.g.run({h.x: h.fx}, [h.y], device="tpu"), "tpu", op="device")
    expect(h, mg.GraphValueError, lambda: mg.Device("cpu:x"), "cpu:x", op="device")


@pytest.mark.parametrize("dev", ["metal", "cuda", "cuda:3", "metal:2"])
def test_device_not_available(h, dev):
    if dev in [str(d) for d in mg.devices()] or mg.Device(dev).available:
        # present on this machine: it must then work
        r = h.g.run({h.x: h.fx}, [h.y], device=dev)[h.y]
        np.testing.assert_allclose(np.asarray(r), np.exp(h.fx.astype(np.float64)) * 2 + 1, rtol=1e-5)
        return
    msg = expect(h, mg.GraphError, lambda: h.g.run({h.x: h.fx}, [h.y], device=dev), dev.split(":")[0])
    assert isinstance(msg, str)
    expect(h, mg.GraphError, lambda: h.g.compile({h.x: ((2, 3), F32)}, [h.y], device=dev), dev.split(":")[0])


def test_none_dims_broadcast_mismatch_known_at_run(h):
    a = h.g.placeholder((None,), F32, name="a_dyn")
    b = h.g.placeholder((None,), F32, name="b_dyn")
    y = h.g.addition(a, b, name="add_dyn")
    r = h.g.run({a: np.ones(3, np.float32), b: np.full(3, 2, np.float32)}, [y])[y]
    np.testing.assert_array_equal(np.asarray(r), [3, 3, 3])
    expect(h, mg.GraphValueError, lambda: h.g.run({a: np.ones(3, np.float32), b: np.ones(4, np.float32)}, [y]),
           "(3,)", "(4,)", op="addition", node="add_dyn")


# ---------------- executables ----------------

def test_executable_wrong_number_of_inputs(h):
    exe = h.g.compile({h.x: ((2, 3), F32)}, [h.y])
    expect(h, mg.GraphValueError, lambda: exe.run([h.fx, h.fx]), "1", "2", op="run")
    expect(h, mg.GraphValueError, lambda: exe.run([]), op="run")
    np.testing.assert_allclose(np.asarray(exe.run([h.fx])[0]), np.exp(h.fx.astype(np.float64)) * 2 + 1, rtol=1e-6)


def test_executable_wrong_input_types(h):
    exe = h.g.compile({h.x: ((2, 3), F32)}, [h.y])
    expect(h, mg.GraphValueError, lambda: exe.run([h.fi]), "int32(2, 3)", "float32(2, 3)", op="placeholder",
           node="x_in")
    expect(h, mg.GraphValueError, lambda: exe.run([np.zeros((3, 2), np.float32)]), "(3, 2)", op="placeholder")
    expect(h, mg.GraphTypeError, lambda: exe.run(["not an array"]), "str")
    expect(h, mg.GraphValueError, lambda: exe.run({h.xi: h.fi}), "x_in", op="run")
    np.testing.assert_allclose(np.asarray(exe.run({h.x: h.fx})[0]), np.exp(h.fx.astype(np.float64)) * 2 + 1,
                               rtol=1e-6)


def test_out_buffers_wrong_shape(h):
    exe = h.g.compile({h.x: ((2, 3), F32)}, [h.y])
    expect(h, mg.GraphValueError, lambda: exe.run([h.fx], out=[np.empty((3,), np.float32)]),
           "float32(3,)", "float32(2, 3)", op="run", node=h.y.name)


def test_out_buffers_wrong_dtype_and_count(h):
    exe = h.g.compile({h.x: ((2, 3), F32)}, [h.y])
    expect(h, mg.GraphValueError, lambda: exe.run([h.fx], out=[np.empty((2, 3), np.float64)]),
           "float64(2, 3)", "float32(2, 3)", op="run")
    expect(h, mg.GraphValueError, lambda: exe.run([h.fx], out=[]), "1", "0", op="run")
    buf = np.full((2, 3), -7, np.float32)
    exe.run([h.fx], out=[buf])
    np.testing.assert_allclose(buf, np.exp(h.fx.astype(np.float64)) * 2 + 1, rtol=1e-6)


def test_compile_feed_contradicts_placeholder(h):
    expect(h, mg.GraphValueError, lambda: h.g.compile({h.x: ((3, 3), F32)}, [h.y]), "float32(3, 3)",
           "float32(2, 3)", op="placeholder", node="x_in")
    expect(h, mg.GraphValueError, lambda: h.g.compile({h.x: mg.ShapedType((2, 3), mg.float16)}, [h.y]),
           "float16", op="placeholder", node="x_in")
    expect(h, mg.GraphValueError, lambda: h.g.compile({h.x: ((2, 3, 1), F32)}, [h.y]), op="placeholder")


def test_compile_missing_feed(h):
    expect(h, mg.GraphValueError, lambda: h.g.compile({}, [h.y]), "x_in", op="run")


def test_compile_none_dims_then_contradicting_run(h):
    p = h.g.placeholder((None, 3), F32, name="pn")
    y = h.g.negative(p)
    exe = h.g.compile({p: ((None, 3), F32)}, [y])
    np.testing.assert_array_equal(np.asarray(exe.run([np.ones((4, 3), np.float32)])[0]), -np.ones((4, 3)))
    expect(h, mg.GraphValueError, lambda: exe.run([np.ones((4, 2), np.float32)]), "(4, 2)", op="placeholder",
           node="pn")


# ---------------- variables ----------------

def test_assign_wrong_shape(h):
    v = h.g.variable(np.zeros((3,), np.float32), name="w")
    val = h.g.placeholder((4,), F32)
    expect(h, mg.GraphValueError, lambda: h.g.assign(v, val, name="asg"), "float32(4,)", "float32(3,)",
           op="assign_variable", node="asg")


def test_assign_wrong_dtype(h):
    v = h.g.variable(np.zeros((3,), np.float32), name="w")
    val = h.g.placeholder((3,), mg.int32)
    expect(h, mg.GraphValueError, lambda: h.g.assign(v, val), "int32(3,)", "float32(3,)", op="assign_variable")


def test_assign_to_non_variable(h):
    expect(h, mg.GraphTypeError, lambda: h.g.assign(h.y, h.y), op="assign_variable")


def test_set_variable_wrong_shape(h):
    v = h.g.variable(np.zeros((3,), np.float32), name="wv")
    expect(h, mg.GraphValueError, lambda: h.g.set_variable(v, np.zeros((4,), np.float32)), "float32(4,)",
           "float32(3,)", op="set_variable", node="wv")
    # the variable kept its value and still works
    np.testing.assert_array_equal(np.asarray(h.g.run({}, [v])[v]), np.zeros(3))


def test_set_variable_wrong_dtype(h):
    v = h.g.variable(np.zeros((3,), np.float32), name="wv")
    expect(h, mg.GraphValueError, lambda: h.g.set_variable(v, np.zeros((3,), np.float64)), "float64(3,)",
           "float32(3,)", op="set_variable", node="wv")


def test_variable_of_another_graph(h):
    other = mg.Graph()
    v = other.variable(np.zeros(2, np.float32), name="ov")
    expect(h, mg.GraphValueError, lambda: h.g.assign(v, np.ones(2, np.float32)), "ov", op="assign_variable")


# ---------------- no errors: NaN, zero-size, rank-0 ----------------

def test_nan_producing_inputs_give_nan_not_errors():
    g = mg.Graph()
    x = g.placeholder((None,), F32)
    outs = [g.logarithm(x), g.square_root(x), x / x, g.acos(x * 3.0), g.logarithm(x * 0.0)]
    xs = np.array([-1.0, 0.0, 4.0], np.float32)
    res = g.run({x: xs}, outs)
    with np.errstate(all="ignore"):
        want = [np.log(xs), np.sqrt(xs), xs / xs, np.arccos(xs * 3), np.log(xs * 0)]
    for t, w in zip(outs, want):
        np.testing.assert_array_equal(np.asarray(res[t]), w.astype(np.float32))  # nan == nan here


def test_int_division_by_zero_is_not_an_error():
    g = mg.Graph()
    a = g.placeholder((3,), mg.int32)
    b = g.placeholder((3,), mg.int32)
    outs = [a / b, a // b, a % b]
    res = g.run({a: np.array([5, -5, 0], np.int32), b: np.zeros(3, np.int32)}, outs)
    for t in outs:
        np.testing.assert_array_equal(np.asarray(res[t]), [0, 0, 0])  # documented


def test_zero_size_and_rank0_work():
    g = mg.Graph()
    z = g.placeholder((0, 3), F32)
    s = g.placeholder((), F32)
    outs = [z * s, g.exponent(z), s + 1.0, g.negative(s), z + g.constant(np.ones(3, np.float32))]
    res = g.run({z: np.zeros((0, 3), np.float32), s: np.float32(2.0)}, outs)
    assert np.asarray(res[outs[0]]).shape == (0, 3)
    assert np.asarray(res[outs[1]]).shape == (0, 3)
    np.testing.assert_array_equal(np.asarray(res[outs[2]]), np.float32(3.0))
    assert np.asarray(res[outs[2]]).shape == ()
    np.testing.assert_array_equal(np.asarray(res[outs[3]]), np.float32(-2.0))
    assert np.asarray(res[outs[4]]).shape == (0, 3)


def test_many_errors_do_not_break_a_graph(h):
    """Twenty failures in a row, then the graph still computes correctly."""
    b = h.g.placeholder((4,), F32)
    for _ in range(10):
        with pytest.raises(mg.GraphError):
            h.x + b
        with pytest.raises(mg.GraphError):
            h.g.run({h.x: np.zeros((1,), np.float32)}, [h.y])
    h.check()


# ---------------- values that must not be converted silently ----------------

def test_placeholder_non_integer_dim(h):
    # BUG (python/mpsgraph/_graph.py placeholder): int(2.5) silently makes the dim 2
    expect(h, mg.GraphTypeError, lambda: h.g.placeholder((2.5, 3), F32), "2.5", op="placeholder")


def test_shape_attribute_non_integer_dim(h):
    # BUG (python/mpsgraph/_ops.py _attr_value, kinds shape/ints/axes): int() truncates 1.5 to 1
    p = h.g.placeholder((4,), F32)
    expect(h, mg.GraphTypeError, lambda: h.g.reshape(p, shape=(1.5, 4)), "1.5", op="reshape")


def test_ints_attribute_non_integer_entry(h):
    expect(h, mg.GraphTypeError, lambda: h.g.transpose(h.x, permutation=[1, 0.5]), "0.5", op="transpose")


def test_axes_attribute_non_integer_entry(h):
    expect(h, mg.GraphTypeError, lambda: h.g.reduction_sum(h.x, axes=[0.7]), "0.7", op="reduction_sum")


def test_constant_out_of_range_for_dtype(h):
    # BUG: numpy's OverflowError escapes instead of an mg.GraphValueError naming [constant]
    expect(h, mg.GraphValueError, lambda: h.g.constant(300, dtype=mg.int8), "300", "int8", op="constant")


def test_constant_of_unsupported_value(h):
    expect(h, mg.GraphTypeError, lambda: h.g.constant("abc"), op="constant")


def test_variable_of_unsupported_value(h):
    expect(h, mg.GraphTypeError, lambda: h.g.variable(np.zeros(3, "datetime64[D]")), "datetime64")


def test_list_feed_out_of_range_for_int8(h):
    p = h.g.placeholder((1,), mg.int8, name="i8")
    y = p + 1
    expect(h, mg.GraphValueError, lambda: h.g.run({p: [300]}, [y]), "300", "int8", same_nodes=True)


def test_non_native_byte_order_feed(h):
    """A big-endian array is either converted correctly or refused with a GraphTypeError; never misread."""
    be = h.fx.astype(">f4")
    try:
        out = h.g.run({h.x: be}, [h.y])[h.y]
    except mg.GraphTypeError as e:
        assert ">f" in str(e) or "byte order" in str(e)
    else:
        np.testing.assert_allclose(np.asarray(out), np.exp(h.fx.astype(np.float64)) * 2 + 1, rtol=1e-6)
    h.check()


def test_advanced_indexing_is_refused(h):
    expect(h, mg.GraphNotImplementedError, lambda: h.x[np.array([0, 1])], "gather")
    expect(h, mg.GraphTypeError, lambda: h.x[1.5], "float")


def test_cpu_index_that_does_not_exist(h):
    # BUG (python/mpsgraph/_devices.py Device.__str__ drops the cpu index): "cpu:1" silently runs on the cpu
    expect(h, mg.GraphError, lambda: h.g.run({h.x: h.fx}, [h.y], device="cpu:1"), "cpu:1")
