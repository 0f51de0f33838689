"""Bad ONNX models: each gives one clear error (a GraphError subclass) naming the node (name and op
type) and what is wrong; unsupported operators are listed all at once; fuzzed bytes never crash."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import mpsgraph as mg  # noqa: E402


def vi(name, dtype=TensorProto.FLOAT, shape=(2, 3)):
    return helper.make_tensor_value_info(name, dtype, list(shape))


def model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def small_model():
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4), "w")
    return model([helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                  helper.make_node("Relu", ["h"], ["y"], name="act")], [vi("x")], [vi("y", shape=(2, 4))], [w])


def test_valid_model_runs():
    m = mg.onnx.load(small_model().SerializeToString())
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_allclose(m.run({"x": x})["y"], np.maximum(x @ np.arange(12.0).reshape(3, 4), 0), rtol=1e-6)


def test_malformed_protobuf():
    with pytest.raises(mg.onnx.OnnxImportError, match="not a valid ONNX model"):
        mg.onnx.load(b"\x08\x07this is not a protobuf \xff\xff\xff")
    with pytest.raises(mg.onnx.OnnxImportError, match="no graph|not a valid"):
        mg.onnx.load(b"")
    with pytest.raises(mg.GraphError):
        mg.onnx.load(small_model().SerializeToString()[:-7])  # truncated


def test_missing_initializer_names_node():
    m = model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], [vi("x")], [vi("y", shape=(2, 4))])
    for check in (True, False):
        with pytest.raises(mg.onnx.OnnxImportError, match="mm") as e:
            mg.onnx.load(m, check=check)
        assert "w" in str(e.value) and "MatMul" in str(e.value)


def test_unsupported_operators_listed_at_once():
    nodes = [helper.make_node("Unique", ["x"], ["d"], name="det1"),
             helper.make_node("NonMaxSuppression", ["b", "s"], ["i"], name="nms"),
             helper.make_node("MyOp", ["x"], ["c"], name="custom", domain="my.domain"),
             helper.make_node("Unique", ["x"], ["d2"], name="det2")]
    m = helper.make_model(helper.make_graph(nodes, "g", [vi("x", shape=(3, 3)), vi("b", shape=(1, 4, 4)),
                                                          vi("s", shape=(1, 1, 4))],
                                           [vi("d", shape=(None,)), vi("i", TensorProto.INT64, (None, 3)),
                                            vi("c", shape=(3, 3)), vi("d2", shape=(None,))]),
                          opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.domain", 1)])
    with pytest.raises(mg.onnx.UnsupportedOperatorError) as e:
        mg.onnx.load(m, check=False)
    msg = str(e.value)
    for s in ("3 unsupported", "Unique", "det1", "det2", "NonMaxSuppression", "nms", "MyOp", "my.domain"):
        assert s in msg, (s, msg)
    assert isinstance(e.value, NotImplementedError) and isinstance(e.value, mg.GraphError)
    assert sorted(op for op, *_ in e.value.unsupported) == ["MyOp", "NonMaxSuppression", "Unique"]


def test_opset_versions():
    m = small_model()
    m.opset_import[0].version = 9
    with pytest.raises(mg.onnx.UnsupportedOperatorError, match="opset 9.*version_converter"):
        mg.onnx.load(m, check=False)
    m.opset_import[0].version = onnx.defs.onnx_opset_version() + 5
    with pytest.raises(mg.onnx.UnsupportedOperatorError, match="newer"):
        mg.onnx.load(m, check=False)


def test_dtype_mismatch_names_node():
    m = model([helper.make_node("Add", ["x", "k"], ["y"], name="add_bad")],
              [vi("x"), vi("k", TensorProto.INT64)], [vi("y")])
    with pytest.raises(mg.onnx.OnnxTypeError, match=r"add_bad.*\(Add\).*float32.*int64"):
        mg.onnx.load(m, check=False)
    # a declared output dtype that the graph does not compute
    m = model([helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x")], [vi("y", TensorProto.INT32)])
    with pytest.raises(mg.onnx.OnnxTypeError, match="'y'.*int32.*float32"):
        mg.onnx.load(m, check=False)
    # a feed of the wrong dtype or shape
    ok = mg.onnx.load(small_model())
    with pytest.raises(mg.onnx.OnnxTypeError, match="'x' must be float32"):
        ok.run({"x": np.zeros((2, 3), np.int32)})
    with pytest.raises(mg.onnx.OnnxImportError, match=r"'x' must have shape \(2, 3\)"):
        ok.run({"x": np.zeros((3, 3), np.float32)})


def test_cycle_names_node():
    nodes = [helper.make_node("Relu", ["b"], ["a"], name="n1"), helper.make_node("Neg", ["a"], ["b"], name="n2"),
             helper.make_node("Add", ["x", "a"], ["y"], name="n3")]
    m = model(nodes, [vi("x")], [vi("y")])
    with pytest.raises(mg.onnx.OnnxImportError, match="cycle") as e:
        mg.onnx.load(m, check=False)
    assert "n1" in str(e.value) or "n2" in str(e.value)
    with pytest.raises(mg.onnx.OnnxImportError, match="n1|n2"):
        mg.onnx.load(m)  # onnx.checker's message names the node too


def test_undefined_input_names_node():
    m = model([helper.make_node("Relu", ["nowhere"], ["y"], name="lonely")], [vi("x")], [vi("y")])
    with pytest.raises(mg.onnx.OnnxImportError, match=r"lonely.*Relu.*'nowhere' is not defined"):
        mg.onnx.load(m, check=False)


def test_bad_attribute_names_node():
    m = model([helper.make_node("Transpose", ["x"], ["y"], name="tp", perm=[0, 5])], [vi("x")], [vi("y")])
    with pytest.raises(mg.GraphError, match=r"tp.*Transpose"):
        mg.onnx.load(m, check=False)
    m = model([helper.make_node("Concat", ["x", "x"], ["y"], name="cat", axis=4)], [vi("x")], [vi("y")])
    with pytest.raises(mg.GraphError, match=r"cat.*Concat.*axis 4"):
        mg.onnx.load(m, check=False)


def test_graph_unchanged_after_error():
    g = mg.Graph()
    x = g.placeholder((2,), mg.float32)
    n = g.num_nodes
    bad = model([helper.make_node("Add", ["x", "k"], ["y"], name="add_bad")],
                [vi("x"), vi("k", TensorProto.INT64)], [vi("y")])
    with pytest.raises(mg.GraphError):
        mg.onnx.load(bad, graph=g, check=False)
    # the graph may hold the partial import's nodes, but stays usable
    assert g.num_nodes >= n
    y = x * 2.0
    np.testing.assert_array_equal(g.run({x: np.ones(2, np.float32)}, [y])[y].numpy(), [2, 2])


ALLOWED = (mg.GraphError, FileNotFoundError, MemoryError, RecursionError)


def test_fuzzed_bytes_never_crash():
    rng = np.random.default_rng(1234)
    base = bytearray(small_model().SerializeToString())
    outcomes = {"ok": 0, "error": 0}
    cases = [bytes(rng.integers(0, 256, n, dtype=np.uint8)) for n in (0, 1, 5, 64, 300)]
    for _ in range(300):
        b = bytearray(base)
        for _ in range(int(rng.integers(1, 6))):
            kind = rng.integers(0, 3)
            i = int(rng.integers(0, len(b)))
            if kind == 0:
                b[i] = int(rng.integers(0, 256))
            elif kind == 1:
                del b[i:i + int(rng.integers(1, 8))]
            else:
                b[i:i] = bytes(rng.integers(0, 256, int(rng.integers(1, 8)), dtype=np.uint8))
        cases.append(bytes(b))
    x = np.ones((2, 3), np.float32)
    for data in cases:
        for check in (True, False):
            try:
                m = mg.onnx.load(data, check=check)
                m.run({n: np.zeros([d or 1 for d in t.shape], mg._dtypes.to_numpy_dtype(t.dtype))
                       for n, t in m.inputs.items()} if set(m.inputs) != {"x"} else {"x": x})
                outcomes["ok"] += 1
            except ALLOWED:
                outcomes["error"] += 1
    assert outcomes["error"] > 0 and outcomes["ok"] > 0, outcomes


def test_external_data_beside_the_model(tmp_path):
    m = small_model()
    path = tmp_path / "ext.onnx"
    onnx.save_model(m, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="w.bin",
                    size_threshold=0)
    assert (tmp_path / "w.bin").exists()
    x = np.ones((2, 3), np.float32)
    want = np.maximum(x @ np.arange(12, dtype=np.float32).reshape(3, 4), 0)
    np.testing.assert_allclose(mg.onnx.load(str(path)).run({"x": x})["y"], want)
    (tmp_path / "w.bin").unlink()
    with pytest.raises(mg.onnx.OnnxImportError, match="w"):
        mg.onnx.load(str(path))
