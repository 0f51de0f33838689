"""python -m mpsgraph.onnx MODEL.onnx [--run] [--compare]: the command line for people with a file."""
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _save(tmp_path, nodes, inputs, outputs, inits=()):
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(inits)),
                          opset_imports=[helper.make_opsetid("", 17)])
    p = tmp_path / "m.onnx"
    p.write_bytes(m.SerializeToString())
    return str(p)


def _cli(*args, subprocess_run=False):
    if subprocess_run:  # the real `python -m` entry point (slower: a fresh interpreter)
        r = subprocess.run([sys.executable, "-m", "mpsgraph.onnx", *args], capture_output=True, text=True,
                           timeout=300)
        return r.returncode, r.stdout + r.stderr
    import contextlib
    import io
    from mpsgraph.onnx.__main__ import main
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        rc = main(list(args))
    return rc, buf.getvalue()


def test_cli_summary_run_and_compare(tmp_path):
    pytest.importorskip("onnxruntime")
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32), "w")
    path = _save(tmp_path, [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"]),
                            helper.make_node("Relu", ["y"], ["z"])],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
                 [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 4])], [w])
    rc, out = _cli(path, subprocess_run=True)
    assert rc == 0, out
    assert "x: float[batch, 3]" in out and "z: float[batch, 4]" in out
    assert "2  Relu" in out and "1  MatMul" in out and "unsupported operators: none" in out
    rc, out = _cli(path, "--run", "--compare", "--dim", "batch=5", "--repeat", "2")
    assert rc == 0, out
    assert "z: float32[5, 4]" in out and "median of 2 runs" in out
    diff = float(out.split("largest difference per output")[1].split("z:")[1].split()[0])
    assert diff < 1e-5


def test_cli_lists_unsupported(tmp_path):
    path = _save(tmp_path, [helper.make_node("Det", ["x"], ["d"], name="det"),
                            helper.make_node("Unique", ["x"], ["u"], name="uniq")],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])],
                 [helper.make_tensor_value_info("d", TensorProto.FLOAT, []),
                  helper.make_tensor_value_info("u", TensorProto.FLOAT, [None])])
    rc, out = _cli(path, "--run")
    assert rc == 1
    assert "Unique" in out and "'uniq'" in out and "(not supported)" in out
    det_line = next(line for line in out.splitlines() if line.strip().endswith("Det"))  # supported: no mark
    assert "not supported" not in det_line


def test_cli_bad_file(tmp_path):
    p = tmp_path / "bad.onnx"
    p.write_bytes(b"\x00garbage\xff")
    rc, out = _cli(str(p))
    assert rc == 2 and "not a valid ONNX model" in out
