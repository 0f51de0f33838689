"""Shape values in imported ONNX models: folded when dims are static, tracked per element (run-time
dims and products of them) when they are not."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import mpsgraph as mg  # noqa: E402

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _c(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def _model(nodes, inputs, outputs, inits=()):
    return helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(inits)),
                             opset_imports=[helper.make_opsetid("", 18)])


def _merge_heads(batch):
    # y = reshape(x, [shape(x)[0] * shape(x)[1], shape(x)[2]]): x.view(B * H, D)
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "i0"], ["b"], axis=0),
             helper.make_node("Gather", ["s", "i1"], ["h"], axis=0),
             helper.make_node("Gather", ["s", "i2"], ["d"], axis=0),
             helper.make_node("Mul", ["b", "h"], ["bh"]),
             helper.make_node("Unsqueeze", ["bh", "ax0"], ["bh1"]),
             helper.make_node("Unsqueeze", ["d", "ax0"], ["d1"]),
             helper.make_node("Concat", ["bh1", "d1"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["y"], name="merge")]
    inits = [_c("i0", np.int64(0)), _c("i1", np.int64(1)), _c("i2", np.int64(2)), _c("ax0", np.array([0], np.int64))]
    return _model(nodes, [helper.make_tensor_value_info("x", F, [batch, 4, 8])],
                  [helper.make_tensor_value_info("y", F, [None, 8])], inits)


def test_static_shape_chain_is_folded():
    m = mg.onnx.load(_merge_heads(3))
    assert m.outputs["y"].shape == (12, 8)
    ops = {o.op_type for o in m.graph.operations}
    assert "shape_of" not in ops and "gather" not in ops and "concat" not in ops


def test_run_time_dims_through_shape_arithmetic():
    m = mg.onnx.load(_merge_heads("B"))
    assert m.inputs["x"].shape == (None, 4, 8)
    assert m.outputs["y"].shape == (None, 8)
    for b in (1, 5):
        x = np.random.default_rng(b).standard_normal((b, 4, 8)).astype(np.float32)
        np.testing.assert_array_equal(m.run({"x": x})["y"], x.reshape(b * 4, 8))


def test_expand_and_constant_of_shape_with_run_time_dims():
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Expand", ["row", "s"], ["e"]),
             helper.make_node("ConstantOfShape", ["s"], ["z"],
                              value=numpy_helper.from_array(np.array([2.5], np.float32))),
             helper.make_node("Add", ["e", "z"], ["y"])]
    m = _model(nodes, [helper.make_tensor_value_info("x", F, ["N", 3])],
               [helper.make_tensor_value_info("y", F, ["N", 3])], [_c("row", np.array([[1, 2, 3]], np.float32))])
    model = mg.onnx.load(m)
    for n in (1, 4):
        got = model.run({"x": np.zeros((n, 3), np.float32)})["y"]
        np.testing.assert_array_equal(got, np.broadcast_to(np.array([[3.5, 4.5, 5.5]], np.float32), (n, 3)))


def test_input_shapes_fix_symbolic_dims():
    m = mg.onnx.load(_merge_heads("B"), input_shapes={"x": (2, 4, 8)})
    assert m.inputs["x"].shape == (2, 4, 8) and m.outputs["y"].shape == (8, 8)
    with pytest.raises(mg.onnx.OnnxImportError, match="input_shapes"):
        mg.onnx.load(_merge_heads("B"), input_shapes={"x": (2, 5, 8)})
