"""Runs the node test cases the onnx package generates (onnx.backend.test.case.node) through
mpsgraph's ONNX backend and tallies pass / fail / unsupported per operator.

    python tests/onnx_node_cases.py            # prints the per-operator table (markdown)
    python tests/onnx_node_cases.py --failures # and every failing case with its error
    python tests/onnx_node_cases.py --update-docs  # rewrites the table in docs/onnx.md

tests/test_onnx_node.py runs the same cases under pytest and asserts that each operator the
importer claims (mpsgraph.onnx.supported_operators()) passes all of its cases, except those
listed in KNOWN_FAILURES with the reason."""
import os
import pickle
import sys
import tempfile
import time
import warnings

import numpy as np

# case name -> why it fails (an operator claimed supported, a case it does not pass)
KNOWN_FAILURES = {
    "test_training_dropout": "random: mpsgraph's Philox stream is not numpy's, so the dropped elements differ",
    "test_training_dropout_default": "random: as test_training_dropout",
    "test_training_dropout_default_mask": "random: as test_training_dropout",
    "test_training_dropout_mask": "random: as test_training_dropout",
    "test_attention_3d_causal_bf16": "bfloat16: its function body rounds to bfloat16 after every op, the reference "
                                     "computes in float32",
    "test_attention_3d_causal_bf16_expanded": "as test_attention_3d_causal_bf16",
    "test_attention_4d_causal_bf16": "as test_attention_3d_causal_bf16",
    "test_attention_4d_causal_bf16_expanded": "as test_attention_3d_causal_bf16",
    "test_attention_4d_causal_padded_kv_bf16": "as test_attention_3d_causal_bf16",
    "test_attention_4d_causal_padded_kv_bf16_expanded": "as test_attention_3d_causal_bf16",
    "test_attention_4d_padded_kv_bf16": "as test_attention_3d_causal_bf16",
    "test_attention_4d_padded_kv_bf16_expanded": "as test_attention_3d_causal_bf16",
    "test_scan_sum": "an opset-8 Scan (batch axis first) that onnx.version_converter turns into opset 13 without "
                     "removing the batch axis from its declared inputs",
    "test_resize_downsample_scales_linear_align_corners": "align_corners with an output dim of 1: the graph's resize "
                                                          "samples another source position than ONNX's 0",
}

# cases of supported operators that are not supported, by the reason's text: types mpsgraph has no
# dtype for, and ONNX opsets older than 13
UNSUPPORTED_REASONS = ("element type", "is not a tensor", "the model uses opset", "not tensors",
                       "sequence types", "optional types")

# limits of supported operators, by the reason's text (the importer raises UnsupportedOperatorError
# naming the node and this text)
KNOWN_LIMITS = {
    "mode 'cubic'": "Resize, GridSample: cubic interpolation is not in the op library (nearest and linear are)",
    "only 2-D sampling": "GridSample: volumetric (5-D) sampling is not in the op library",
    "antialias=1": "Resize: antialiased downsampling is not in the op library",
    "the axes attribute": "Resize: the axes attribute (resizing other than the two spatial dims of NCHW)",
    "'tf_crop_and_resize'": "Resize: crop-and-resize coordinates",
    "'pytorch_half_pixel'": "Resize: pytorch_half_pixel with an output size of 1",
    "'half_pixel_symmetric'": "Resize: half_pixel_symmetric coordinates",
    "keep_aspect_ratio_policy": "Resize: keep_aspect_ratio_policy other than stretch",
    "blocked quantisation": "QuantizeLinear/DequantizeLinear: block_size (blocked quantisation)",
    "repeated subscript": "Einsum: repeated subscripts (diagonals)",
    "larger than the full transposed convolution": "ConvTranspose: output_shape beyond the full result",
    "scan outputs of a Loop": "Loop: scan outputs of a loop whose trip count is known only at run time",
    "starts must be known": "Slice: starts/ends computed at run time (here by a Loop body from its iteration "
                            "number)",
    "NegativeLogLikelihoodLoss": "function-expanded cases using an unsupported operator",
    "whose output size is not exact": "Resize: non-nearest modes with scales whose output size is not exactly "
                                      "in * scale (ONNX samples with the scale itself, the graph's resize with "
                                      "out / in)",
}


def collect():
    """The onnx package's node cases: (name, op type, ModelProto, data sets, rtol, atol). Generating
    them takes ~20 s, so they are cached per onnx version in the user's cache dir (~/.cache/mpsgraph)."""
    import onnx
    cache = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
                         "mpsgraph")
    try:
        os.makedirs(cache, exist_ok=True)
    except OSError:
        cache = tempfile.mkdtemp()
    path = os.path.join(cache, f"onnx-node-cases-v2-{onnx.__version__}.pkl")
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except Exception:
        pass
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    names = {s.name for s in onnx.defs.get_all_schemas_with_history() if s.domain == ""}
    by_key = {n.lower(): n for n in names}
    out = []
    for c in cases:
        if c.kind != "node":
            continue
        out.append((c.name, _op_of(c.name, c.model, by_key), c.model.SerializeToString(), c.data_sets, c.rtol,
                    c.atol))
    out = _fix_expanded(out)
    try:
        tmp = path + f".{os.getpid()}"
        with open(tmp, "wb") as f:
            pickle.dump(out, f)
        os.replace(tmp, path)
    except OSError:
        pass
    return out


def _fix_expanded(out):
    """Expanded (function body) cases count under the operator of the case they expand."""
    ops = {n: op for n, op, m, *_ in out}
    res = []
    for c in out:
        base = c[0].split("_expanded")[0]
        res.append((c[0], ops.get(base, c[1])) + tuple(c[2:]) if base != c[0] else c)
    return res


def _op_of(name, model, by_key):
    """The operator a case tests: its single node's op, or (expanded function tests, multi-node
    cases) the longest op name that prefixes the case name."""
    if len(model.graph.node) == 1 and not name.endswith("_expanded") and "_expanded_" not in name:
        return model.graph.node[0].op_type
    key = name[len("test_"):].replace("_", "")
    best = None
    for k, n in by_key.items():
        if key.startswith(k) and (best is None or len(k) > len(best[0])):
            best = (k, n)
    return best[1] if best else model.graph.node[0].op_type


def run_case(case):
    """'pass', ('fail', why) or ('unsupported', why) for one case."""
    import onnx
    name, op, model_bytes, data_sets, rtol, atol = case
    from onnx import numpy_helper

    def arr(v):
        return numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else v
    from mpsgraph.onnx.backend import MpsgraphBackend
    model = onnx.ModelProto()
    model.ParseFromString(model_bytes)
    try:
        m = MpsgraphBackend.prepare(model)
    except NotImplementedError as e:  # UnsupportedOperatorError, UnsupportedTypeError
        return "unsupported", str(e).splitlines()[-1].strip()
    except Exception as e:
        return "fail", f"import: {type(e).__name__}: {e}"
    for inputs, outputs in data_sets:
        if any(isinstance(v, (list, dict)) or v is None for v in list(inputs) + list(outputs)):
            return "unsupported", "inputs or outputs that are not tensors (sequences, maps or optionals)"
        inputs, outputs = [arr(v) for v in inputs], [arr(v) for v in outputs]
        try:
            got = list(m.run([np.asarray(v) for v in inputs]))
        except NotImplementedError as e:
            return "unsupported", str(e)
        except Exception as e:
            return "fail", f"run: {type(e).__name__}: {e}"
        if len(got) != len(outputs):
            return "fail", f"{len(got)} outputs, expected {len(outputs)}"
        for i, (g, want) in enumerate(zip(got, outputs)):
            want = np.asarray(want)
            g = np.asarray(g)
            if g.dtype != want.dtype:
                return "fail", f"output {i}: dtype {g.dtype}, expected {want.dtype}"
            if g.shape != want.shape:
                return "fail", f"output {i}: shape {g.shape}, expected {want.shape}"
            if want.dtype.kind in "fc" or want.dtype.name == "bfloat16":
                gw, ww = g.astype(np.float64), want.astype(np.float64)
                if not np.allclose(gw, ww, rtol=rtol, atol=atol, equal_nan=True):
                    err = np.nanmax(np.abs(gw - ww)) if g.size else 0
                    return "fail", f"output {i}: values differ (max abs difference {err:.3g})"
            elif not np.array_equal(g, want):
                return "fail", f"output {i}: values differ"
    return "pass", ""


def run_all(cases=None):
    """{case name: (op, status, why)} for every case."""
    cases = collect() if cases is None else cases
    out = {}
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for c in cases:
            try:
                status, why = run_case(c)
            except Exception as e:  # never let one case stop the table
                status, why = "fail", f"{type(e).__name__}: {e}"
            out[c[0]] = (c[1], status, why)
    return out


def table(results):
    """Markdown table: operator | passed | failed | not supported, and totals."""
    import mpsgraph as mg
    claimed = set(mg.onnx.supported_operators())
    per = {}
    for name, (op, status, _) in results.items():
        row = per.setdefault(op, [0, 0, 0])
        row[{"pass": 0, "fail": 1, "unsupported": 2}[status]] += 1
    lines = ["| operator | passed | failed | not supported |", "|---|---|---|---|"]
    tot = [0, 0, 0]
    for op in sorted(per):
        p, f, u = per[op]
        tot = [tot[0] + p, tot[1] + f, tot[2] + u]
        mark = "" if op in claimed else " (not supported)"
        lines.append(f"| {op}{mark} | {p} | {f} | {u} |")
    lines.append(f"| **total** ({len(per)} operators) | {tot[0]} | {tot[1]} | {tot[2]} |")
    return "\n".join(lines)


def summary(results):
    import mpsgraph as mg
    claimed = set(mg.onnx.supported_operators())
    n = {k: sum(1 for _, s, _ in results.values() if s == k) for k in ("pass", "fail", "unsupported")}
    ops = {op for op, _, _ in results.values()}
    return (f"{len(results)} node cases of onnx {__import__('onnx').__version__} covering {len(ops)} operators: "
            f"{n['pass']} pass, {n['fail']} fail, {n['unsupported']} not supported; "
            f"{len(claimed & ops)} of those operators are claimed supported")


def update_docs(results):
    """Rewrites the text between the node-table markers of docs/onnx.md and README.md."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    _update(results, os.path.join(root, "docs", "onnx.md"), details=True)
    _update(results, os.path.join(root, "README.md"), details=False)


def _update(results, path, details):
    with open(path) as f:
        text = f.read()
    start, end = "<!-- node-table start -->", "<!-- node-table end -->"
    i, j = text.index(start) + len(start), text.index(end)
    known = "\n".join(f"| `{k}` | {v} |" for k, v in sorted(KNOWN_FAILURES.items()))
    limits = "\n".join(f"| {v} |" for v in dict.fromkeys(KNOWN_LIMITS.values()))
    if not details:
        body = f"\n{summary(results)}.\n\n{table(results)}\n\n"
        with open(path, "w") as f:
            f.write(text[:i] + body + text[j:])
        return
    body = (f"\n{summary(results)}.\n\n{table(results)}\n\nKnown failures (cases of supported operators that "
            f"fail, and why):\n\n| case | reason |\n|---|---|\n{known}\n\nLimits (cases of supported operators "
            f"that are refused with UnsupportedOperatorError naming the node):\n\n| limit |\n|---|\n{limits}\n\n")
    with open(path, "w") as f:
        f.write(text[:i] + body + text[j:])


if __name__ == "__main__":
    import mpsgraph as mg
    t0 = time.time()
    cs = collect()
    t1 = time.time()
    res = run_all(cs)
    t2 = time.time()
    print(table(res))
    if "--update-docs" in sys.argv:
        update_docs(res)
    print(f"\n{len(cs)} cases: collected in {t1 - t0:.1f} s, ran in {t2 - t1:.1f} s", file=sys.stderr)
    if "--failures" in sys.argv:
        for name, (op, status, why) in sorted(res.items()):
            claimed = op in mg.onnx.supported_operators()
            if status == "fail" or status == "unsupported" and claimed and "element type" not in why:
                print(f"{status:11s} {op:24s} {name}: {why[:300]}")
