"""The onnx package's node test cases through mpsgraph's ONNX backend (onnx.backend.base.Backend).

Every operator mpsgraph.onnx claims to support passes all of its cases, except the cases listed
in onnx_node_cases.KNOWN_FAILURES (with the reason) and cases not supported for a reason that is
not the operator's (element types mpsgraph has no dtype for, sequences, opsets before 13). The
per-operator table in docs/onnx.md comes from the same run (python tests/onnx_node_cases.py)."""
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnx.backend.test.case.node")

import onnx_node_cases as cases  # noqa: E402
import mpsgraph as mg  # noqa: E402


@pytest.fixture(scope="module")
def results():
    return cases.run_all()


def test_claimed_operators_pass_their_cases(results):
    claimed = set(mg.onnx.supported_operators())
    bad = []
    for name, (op, status, why) in sorted(results.items()):
        if op not in claimed or status == "pass" or name in cases.KNOWN_FAILURES:
            continue
        if status == "unsupported" and any(r in why for r in (*cases.UNSUPPORTED_REASONS, *cases.KNOWN_LIMITS)):
            continue
        bad.append(f"{name} ({op}): {status}: {why[:200]}")
    assert not bad, f"{len(bad)} case(s) of supported operators fail:\n" + "\n".join(bad)


def test_known_failures_still_fail(results):
    # the list stays honest: a case that passes again is taken off it
    passing = [n for n in cases.KNOWN_FAILURES if results.get(n, (None, "missing"))[1] == "pass"]
    assert not passing, f"listed as failing but pass now: {passing}"
    missing = [n for n in cases.KNOWN_FAILURES if n not in results]
    assert not missing, f"listed cases that onnx does not generate: {missing}"


def test_coverage_floor(results):
    passed = sum(1 for _, s, _ in results.values() if s == "pass")
    assert passed >= 1400, f"only {passed} node cases pass"


def test_backend_interface():
    import numpy as np
    from onnx import helper, TensorProto
    from mpsgraph.onnx.backend import MpsgraphBackend
    node = helper.make_node("Add", ["a", "b"], ["c"])
    a, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.ones(3, np.float32)
    (c,) = MpsgraphBackend.run_node(node, [a, b])
    np.testing.assert_array_equal(c, a + b)
    assert MpsgraphBackend.supports_device("CPU")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3]),
                                        helper.make_tensor_value_info("b", TensorProto.FLOAT, [3])],
                          [helper.make_tensor_value_info("c", TensorProto.FLOAT, [2, 3])])
    rep = MpsgraphBackend.prepare(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    np.testing.assert_array_equal(rep.run([a, b])[0], a + b)
