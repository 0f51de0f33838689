"""python -m mpsgraph.onnx MODEL.onnx [--run] [--compare] [--repeat N] [--dim NAME=SIZE] [--device D]

Prints the model's inputs, outputs, operator histogram and any unsupported operators. --run
feeds random inputs of the declared shapes (unknown dims: --dim NAME=SIZE, else 1) and prints the
outputs and timings; --compare also runs ONNX Runtime and prints the largest difference per output."""
import argparse
import collections
import sys
import time

import numpy as np


def _shape_str(shape):
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _walk(graph, onnx):
    for n in graph.node:
        yield n
        for a in n.attribute:
            subs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
            for sg in subs:
                yield from _walk(sg, onnx)


def _random_input(name, vi, dims, rng, onnx):
    from ._model import np_dtype
    tt = vi.type.tensor_type
    shape = []
    for i, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value") and d.dim_value >= 0:
            shape.append(int(d.dim_value))
        else:
            shape.append(int(dims.get(d.dim_param, dims.get(f"{name}:{i}", 1))))
    dt = np.dtype(np_dtype(tt.elem_type, f"input '{name}'"))
    if dt.kind == "f" or dt.name == "bfloat16":
        return rng.standard_normal(shape).astype(dt)
    if dt.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    return rng.integers(0, 4, shape).astype(dt)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m mpsgraph.onnx", description=__doc__.split("\n\n")[1])
    ap.add_argument("model", help="path to an .onnx file")
    ap.add_argument("--run", action="store_true", help="run with random inputs and print outputs and timings")
    ap.add_argument("--compare", action="store_true", help="also run ONNX Runtime and print the largest differences")
    ap.add_argument("--repeat", type=int, default=10, help="timed runs after the first (default 10)")
    ap.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE",
                    help="size of a symbolic dim (its dim_param name), e.g. --dim batch=8")
    ap.add_argument("--device", default=None, help="cpu (default) or metal")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    import onnx
    import mpsgraph as mg
    from . import load, UnsupportedOperatorError
    from ._model import _read_model, Importer

    dims = {}
    for d in args.dim:
        k, _, v = d.partition("=")
        dims[k] = int(v)
    t0 = time.perf_counter()
    try:
        proto, _ = _read_model(args.model)
    except (mg.GraphError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    g = proto.graph
    inits = {t.name for t in g.initializer}
    opsets = ", ".join(f"{i.domain or 'ai.onnx'} {i.version}" for i in proto.opset_import)
    print(f"model: {args.model}  (producer: {proto.producer_name or '?'} {proto.producer_version}; opset {opsets})")
    print(f"nodes: {sum(1 for _ in _walk(g, onnx))}; initializers: {len(g.initializer)} "
          f"({sum(int(np.prod(t.dims)) for t in g.initializer):,} values)")

    def describe(vi):
        tt = vi.type.tensor_type
        shape = [d.dim_param or ("?" if not d.HasField("dim_value") else str(d.dim_value)) for d in tt.shape.dim]
        et = onnx.TensorProto.DataType.Name(tt.elem_type) if tt.elem_type else "?"
        return f"  {vi.name}: {et.lower()}[{', '.join(shape)}]"
    print("inputs:")
    for vi in g.input:
        if vi.name not in inits:
            print(describe(vi))
    print("outputs:")
    for vi in g.output:
        print(describe(vi))
    hist = collections.Counter((n.domain or "", n.op_type) for n in _walk(g, onnx))
    print("operators:")
    from ._ops import HANDLERS
    for (dom, op), k in sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])):
        ok = dom in ("", "ai.onnx") and op in HANDLERS
        print(f"  {k:6d}  {(dom + '.' if dom else '') + op}{'' if ok else '   (not supported)'}")
    try:
        Importer(proto, mg.Graph(), False, None).check_supported(g)
        print("unsupported operators: none")
    except UnsupportedOperatorError as e:
        print("unsupported operators:\n" + "\n".join(str(e).splitlines()[1:]))
        return 1
    except mg.GraphError as e:
        print(f"error: {e}")
        return 1
    if not (args.run or args.compare):
        return 0

    try:
        model = load(args.model, check=True)
    except mg.GraphError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    t_import = time.perf_counter() - t0
    rng = np.random.default_rng(args.seed)
    feeds = {vi.name: _random_input(vi.name, vi, dims, rng, onnx) for vi in g.input if vi.name not in inits}
    print(f"\nimported in {t_import * 1e3:.1f} ms; inputs: " +
          ", ".join(f"{k}{list(v.shape)}" for k, v in feeds.items()))
    exe = model.compile(device=args.device, input_shapes={k: v.shape for k, v in feeds.items()})
    ins = [feeds[n] for n in model.input_names]
    t = time.perf_counter()
    outs = exe.run(ins)
    first = time.perf_counter() - t
    times = []
    for _ in range(max(args.repeat, 0)):
        t = time.perf_counter()
        outs = exe.run(ins)
        times.append(time.perf_counter() - t)
    outs = [np.asarray(o.numpy()) for o in outs]
    print(f"first run (compiles) {first * 1e3:.2f} ms; median of {len(times)} runs "
          f"{np.median(times) * 1e3 if times else float('nan'):.3f} ms on {exe.device}")
    print("outputs:")
    for name, o in zip(model.output_names, outs):
        stats = ""
        if o.size and o.dtype.kind in "fiub":
            of = o.astype(np.float64)
            stats = f" min {of.min():.4g} max {of.max():.4g} mean {of.mean():.4g}"
        print(f"  {name}: {o.dtype}{list(o.shape)}{stats}")
    if args.compare:
        try:
            import onnxruntime as ort
        except ImportError:
            print("--compare needs onnxruntime (pip install onnxruntime)", file=sys.stderr)
            return 2
        sess = ort.InferenceSession(open(args.model, "rb").read(), providers=["CPUExecutionProvider"])
        t = time.perf_counter()
        ref = sess.run(None, feeds)
        t_ort = time.perf_counter() - t
        ort_times = []
        for _ in range(max(args.repeat, 0)):
            t = time.perf_counter()
            sess.run(None, feeds)
            ort_times.append(time.perf_counter() - t)
        med = np.median(ort_times) * 1e3 if ort_times else 0.0
        print(f"ONNX Runtime: first run {t_ort * 1e3:.2f} ms; median {med:.3f} ms")
        print("largest difference per output (absolute, relative):")
        for name, o, r in zip(model.output_names, outs, ref):
            r = np.asarray(r)
            if o.shape != r.shape:
                print(f"  {name}: shapes differ: {o.shape} vs ONNX Runtime {r.shape}")
                continue
            d = np.abs(o.astype(np.float64) - r.astype(np.float64))
            m = float(np.nanmax(d)) if d.size else 0.0
            rel = float(np.nanmax(d / np.maximum(np.abs(r.astype(np.float64)), 1e-12))) if d.size else 0.0
            print(f"  {name}: {m:.3g}  {rel:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
