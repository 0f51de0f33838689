"""ONNX If / Loop / Scan through the graph's control-flow ops, compared with ONNX Runtime, and
differentiated through."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import mpsgraph as mg  # noqa: E402

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=(), opset=17):
    return helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(inits)),
                             opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, shape, dtype=F):
    return helper.make_tensor_value_info(name, dtype, shape)


def _const(name, arr):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(arr), name + "_v"))


def _check(m, feeds, atol=1e-5):
    data = m.SerializeToString()
    ref = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    out = mg.onnx.load(data).run(feeds)
    for (name, got), want in zip(out.items(), ref):
        assert got.shape == want.shape, name
        np.testing.assert_allclose(got, want, atol=atol, rtol=1e-5, err_msg=name)


def if_model():
    then_g = helper.make_graph([_const("two", np.float32(2)), helper.make_node("Mul", ["x", "two"], ["t_out"])],
                               "then", [], [_vi("t_out", [2, 3])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e_out"])], "else", [], [_vi("e_out", [2, 3])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             _const("zero", np.float32(0)), helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g, name="branch")]
    return _model(nodes, [_vi("x", [2, 3])], [_vi("y", [2, 3])])


def test_if_both_branches():
    m = if_model()
    _check(m, {"x": np.ones((2, 3), np.float32)})
    _check(m, {"x": -np.ones((2, 3), np.float32)})
    g_ops = [o.op_type for o in mg.onnx.load(m).graph.operations]
    assert "if_then_else" in g_ops


def loop_for_model():
    # for i in range(5): v = v * 0.5 + x + i ; scan output: v at each step
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Cast", ["i"], ["fi"], to=F),
         _const("half", np.float32(0.5)),
         helper.make_node("Mul", ["v_in", "half"], ["a"]),
         helper.make_node("Add", ["a", "x"], ["b"]),
         helper.make_node("Add", ["b", "fi"], ["v_out"]),
         helper.make_node("Identity", ["v_out"], ["scan_v"])],
        "body", [_vi("i", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL), _vi("v_in", [3])],
        [_vi("cond_out", [], TensorProto.BOOL), _vi("v_out", [3]), _vi("scan_v", [3])])
    nodes = [_const("M", np.int64(5)), _const("T", np.bool_(True)),
             helper.make_node("Loop", ["M", "T", "v0"], ["v_final", "vs"], body=body, name="loop")]
    return _model(nodes, [_vi("x", [3]), _vi("v0", [3])], [_vi("v_final", [3]), _vi("vs", [5, 3])])


def test_loop_for_form_with_scan_outputs():
    rng = np.random.default_rng(0)
    _check(loop_for_model(), {"x": rng.standard_normal(3).astype(np.float32),
                              "v0": rng.standard_normal(3).astype(np.float32)})


def test_loop_while_form():
    # while sum(v) < 100: v = v * 2  (no trip count)
    body = helper.make_graph(
        [_const("two", np.float32(2)), helper.make_node("Mul", ["v_in", "two"], ["v_out"]),
         helper.make_node("ReduceSum", ["v_out"], ["s"], keepdims=0), _const("lim", np.float32(100)),
         helper.make_node("Less", ["s", "lim"], ["cond_out"])],
        "body", [_vi("i", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL), _vi("v_in", [2])],
        [_vi("cond_out", [], TensorProto.BOOL), _vi("v_out", [2])])
    nodes = [_const("T", np.bool_(True)), helper.make_node("Loop", ["", "T", "v0"], ["v"], body=body)]
    m = _model(nodes, [_vi("v0", [2])], [_vi("v", [2])])
    _check(m, {"v0": np.array([1.0, 2.0], np.float32)})
    _check(m, {"v0": np.array([30.0, 0.5], np.float32)})


def test_scan_running_sum():
    body = helper.make_graph([helper.make_node("Add", ["s_in", "x_t"], ["s_out"]),
                              helper.make_node("Identity", ["s_out"], ["y_t"])], "body",
                             [_vi("s_in", [2]), _vi("x_t", [2])], [_vi("s_out", [2]), _vi("y_t", [2])])
    for directions in ([0], [1]):
        nodes = [helper.make_node("Scan", ["init", "xs"], ["final", "ys"], body=body, num_scan_inputs=1,
                                  scan_input_directions=directions)]
        m = _model(nodes, [_vi("init", [2]), _vi("xs", [4, 2])], [_vi("final", [2]), _vi("ys", [4, 2])])
        rng = np.random.default_rng(1)
        _check(m, {"init": rng.standard_normal(2).astype(np.float32),
                   "xs": rng.standard_normal((4, 2)).astype(np.float32)})


def test_gradient_through_imported_loop():
    m = mg.onnx.load(loop_for_model())
    g = m.graph
    x, v0 = m.inputs["x"], m.inputs["v0"]
    loss = g.reduction_sum(m.outputs["vs"] * m.outputs["vs"], keep_dims=False)
    grads = g.gradients(loss, [x, v0])
    rng = np.random.default_rng(2)
    xv, vv = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    res = g.run({x: xv, v0: vv}, [grads[x], grads[v0]])

    def f(xv, vv):  # the same loop in numpy (float64)
        v, tot = vv.astype(np.float64), 0.0
        for i in range(5):
            v = v * 0.5 + xv + i
            tot += (v * v).sum()
        return tot
    eps = 1e-4
    for t, base, other in ((x, xv, vv), (v0, vv, xv)):
        num = np.zeros(3)
        for k in range(3):
            d = np.zeros(3)
            d[k] = eps
            if t is x:
                num[k] = (f(base + d, other) - f(base - d, other)) / (2 * eps)
            else:
                num[k] = (f(other, base + d) - f(other, base - d)) / (2 * eps)
        np.testing.assert_allclose(res[grads[t]].numpy(), num, rtol=2e-3, atol=2e-3)


def test_loop_early_exit_with_scan_outputs():
    # at most 10 iterations, stopping once sum(v) >= 20; v at each iteration is a scan output
    body = helper.make_graph(
        [_const("two", np.float32(2)), helper.make_node("Mul", ["v_in", "two"], ["v_out"]),
         helper.make_node("ReduceSum", ["v_out"], ["s"], keepdims=0), _const("lim", np.float32(20)),
         helper.make_node("Less", ["s", "lim"], ["cond_out"]), helper.make_node("Identity", ["v_out"], ["row"])],
        "body", [_vi("i", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL), _vi("v_in", [2])],
        [_vi("cond_out", [], TensorProto.BOOL), _vi("v_out", [2]), _vi("row", [2])])
    nodes = [_const("M", np.int64(10)), _const("T", np.bool_(True)),
             helper.make_node("Loop", ["M", "T", "v0"], ["v", "rows"], body=body)]
    m = _model(nodes, [_vi("v0", [2])], [_vi("v", [2]), _vi("rows", [None, 2])])
    for v0 in ([1.0, 0.5], [100.0, 1.0], [1e-3, 0.0]):  # 4 trips, 1 trip, all 10
        _check(m, {"v0": np.array(v0, np.float32)})
