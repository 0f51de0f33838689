"""ONNX control flow (If, Loop, Scan) through the graph's if_then_else / for_loop / while_loop, and the
recurrent layers (LSTM, GRU, RNN) decomposed into matrix products unrolled over a static sequence."""
import numpy as np

from ._model import Env


def _subgraph(cx, gp, env_parent, args):
    """Imports sub-graph gp with its inputs bound to args (values); returns its output values."""
    imp = cx.importer
    env = Env(env_parent)
    if len(args) != len(gp.input):
        cx.fail(f"sub-graph '{gp.name}' has {len(gp.input)} inputs, {len(args)} given")
    for vi, v in zip(gp.input, args):
        env[vi.name] = v
    for t in gp.initializer:
        env[t.name] = imp.initializer(t)
    from ._model import Context
    sub = Context(imp, cx.g, cx.opset)
    node = cx.node
    imp.run_graph(gp, env, sub)
    cx.node = node
    outs = []
    for vi in gp.output:
        v = env.get(vi.name)
        if v is None:
            cx.fail(f"sub-graph output '{vi.name}' is not produced")
        outs.append(v)
    return outs


def _scope(cx):
    return cx.env


def register(op):
    @op("If", fold=False)
    def _if(cx, node, ins, a):
        g = cx.g
        cond = ins[0]
        if isinstance(cond, np.ndarray):  # known now: import the taken branch only
            branch = a["then_branch"] if bool(cond.reshape(-1)[0]) else a["else_branch"]
            return [g.identity(cx.t(v)) if hasattr(v, "graph") else v
                    for v in _subgraph(cx, branch, cx.env, [])]
        c = cx.t(cond)
        if c.ndim:
            c = g.reshape(c, [])
        if c.dtype.name != "bool":
            c = g.cast(c, "bool")
        env = cx.env

        def branch(gp):
            def fn():
                outs = _subgraph(cx, gp, env, [])
                return [cx.t(v) for v in outs]
            return fn

        r = g.if_then_else(c, branch(a["then_branch"]), branch(a["else_branch"]))
        return list(r) if isinstance(r, tuple) else [r]

    @op("Loop", fold=False)
    def _loop(cx, node, ins, a):
        g = cx.g
        body = a["body"]
        m = ins[0] if len(ins) > 0 else None
        cond0 = ins[1] if len(ins) > 1 else None
        init = [cx.t(v) for v in ins[2:]]
        n_carried = len(init)
        n_scan = len(body.output) - 1 - n_carried
        if n_scan < 0:
            cx.fail(f"the body has {len(body.output)} outputs for {n_carried} loop-carried values")
        env = cx.env
        # the body's condition output: when it is the body's cond input passed through (or a
        # constant true), the loop runs exactly M times and becomes a for_loop
        cond_in = body.input[1].name
        cond_out = body.output[0].name
        passthrough = cond_out == cond_in or any(
            n.op_type == "Identity" and n.input[0] == cond_in and n.output[0] == cond_out for n in body.node)
        cond_known = cond0 is None or isinstance(cond0, np.ndarray) and bool(np.asarray(cond0).reshape(-1)[0])
        if m is not None and cond_known and passthrough:
            mv = m
            if isinstance(mv, np.ndarray):
                count = int(mv.reshape(-1)[0])
                n_iter = g.constant(np.int32(count))
            else:
                count = None
                n_iter = g.cast(g.reshape(cx.t(mv), []), "int32")
            if n_scan:
                if count is None:
                    cx.unsupported("scan outputs of a Loop whose trip count is known only at run time")
                return _for_with_scan(cx, body, env, n_iter, count, init, n_scan)

            def body_fn(i, *vals):
                it = g.cast(i, "int64")
                outs = _subgraph(cx, body, env, [it, np.array(True), *vals])
                return [_like(cx, v, ref) for v, ref in zip(outs[1:1 + n_carried], vals)]

            if not init:
                cx.unsupported("a Loop with no loop-carried values")
            return list(g.for_loop(0, n_iter, 1, init, body_fn))
        count = int(np.asarray(m).reshape(-1)[0]) if isinstance(m, np.ndarray) else None
        if n_scan and count is None:
            if m is None:
                cx.unsupported("scan outputs of a Loop that ends on a condition computed at run time and has "
                               "no trip count")
            count = int(np.asarray(cx.c(m, "the trip count of a Loop with scan outputs")).reshape(-1)[0])
        if not init and not n_scan:
            cx.unsupported("a Loop with no loop-carried values")
        bufs, scan_types = [], []
        if n_scan:  # rows for every possible iteration; the ones written are kept after the loop
            probe = _subgraph(cx, body, env, [np.array(0, np.int64), np.array(True), *init])
            scan_types = [cx.t(v) for v in probe[1 + n_carried:]]
            if any(d is None for s in scan_types for d in s.shape):
                cx.unsupported("Loop scan outputs of a shape known only at run time")
            bufs = [g.zeros([count] + list(s.shape), dtype=s.dtype) for s in scan_types]
        i0 = g.constant(np.int64(0))
        c0 = cx.t(cond0) if cond0 is not None else g.constant(True)
        if c0.ndim:
            c0 = g.reshape(c0, [])
        mt = g.reshape(cx.t(m), []) if m is not None else None

        def before(i, c, *vals):
            p = c
            if mt is not None:
                p = g.logical_and(p, g.less_than(i, mt))
            return p, [i, c, *vals]

        def after(i, c, *vals):
            carried, bs = vals[:n_carried], vals[n_carried:]
            outs = _subgraph(cx, body, env, [i, c, *carried])
            cn = cx.t(outs[0])
            if cn.ndim:
                cn = g.reshape(cn, [])
            nxt = [_like(cx, v, ref) for v, ref in zip(outs[1:1 + n_carried], carried)]
            rows = [g.scatter_with_data(b, g.expand_dims(cx.t(v), 0), g.reshape(i, [1]), axis=0, mode="set")
                    for b, v in zip(bs, outs[1 + n_carried:])]
            return [i + 1, cn] + nxt + rows

        res = g.while_loop([i0, c0, *init, *bufs], before, after)
        outs = list(res[2:2 + n_carried])
        if n_scan:  # the first (trip count) rows: a data-dependent selection
            keep = g.less_than(g.constant(np.arange(count, dtype=np.int64)), res[0])
            idx = g.reshape(g.non_zero_indices(keep), [-1])
            outs += [g.gather(b, idx, axis=0) for b in res[2 + n_carried:]]
        return outs

    @op("Scan", fold=False)
    def _scan(cx, node, ins, a):
        g = cx.g
        body = a["body"]
        n_scan_in = int(a["num_scan_inputs"])
        n_state = len(ins) - n_scan_in
        states = [cx.t(v) for v in ins[:n_state]]
        xs = [cx.t(v) for v in ins[n_state:]]
        in_axes = list(a.get("scan_input_axes", [0] * n_scan_in))
        in_dirs = list(a.get("scan_input_directions", [0] * n_scan_in))
        n_scan_out = len(body.output) - n_state
        out_axes = list(a.get("scan_output_axes", [0] * n_scan_out))
        out_dirs = list(a.get("scan_output_directions", [0] * n_scan_out))
        xs = [g.transpose(x, [cx.axis(ax, x.ndim)] + [i for i in range(x.ndim) if i != cx.axis(ax, x.ndim)])
              if cx.axis(ax, x.ndim) else x for x, ax in zip(xs, in_axes)]
        xs = [g.reverse(x, axes=[0]) if d else x for x, d in zip(xs, in_dirs)]
        T = xs[0].shape[0] if xs else None
        if T is None:
            cx.unsupported("Scan needs a static sequence length")
        env = cx.env
        # unrolled: a Scan's body is small and its length static
        seq_outs = [[] for _ in range(n_scan_out)]
        for t in range(T):
            outs = _subgraph(cx, body, env, [*states, *[g.squeeze(g.slice(x, 0, t, 1), [0]) for x in xs]])
            states = [cx.t(v) for v in outs[:n_state]]
            for k in range(n_scan_out):
                seq_outs[k].append(cx.t(outs[n_state + k]))
        res = []
        for k in range(n_scan_out):
            items = seq_outs[k][::-1] if out_dirs[k] else seq_outs[k]
            r = items[0].ndim + 1
            res.append(g.stack(items, axis=cx.axis(out_axes[k], r)))
        return states + res

    from ._rnn import register as register_rnn
    register_rnn(op)


def _like(cx, v, ref):
    """A loop body's next value as a tensor with the carried value's dtype."""
    t = cx.t(v)
    if t.dtype != ref.dtype:
        cx.fail(f"a loop-carried value changes dtype from {ref.dtype.name} to {t.dtype.name}")
    return t


def _for_with_scan(cx, body, env, n_iter, count, init, n_scan):
    """A Loop with M static iterations and scan outputs: buffers of M rows carried through a
    for_loop, each iteration writing its row."""
    g = cx.g
    n_carried = len(init)
    # one dry import of the body to learn the scan outputs' types
    probe = _subgraph(cx, body, env, [np.array(0, np.int64), np.array(True), *init])
    scan_types = [cx.t(v) for v in probe[1 + n_carried:]]
    for s in scan_types:
        if any(d is None for d in s.shape):
            cx.unsupported("Loop scan outputs of a shape known only at run time")
    bufs = [g.zeros([count] + list(s.shape), dtype=s.dtype) for s in scan_types]

    def body_fn(i, *vals):
        it = g.cast(i, "int64")
        carried, bs = vals[:n_carried], vals[n_carried:]
        outs = _subgraph(cx, body, env, [it, np.array(True), *carried])
        nxt = [_like(cx, v, ref) for v, ref in zip(outs[1:1 + n_carried], carried)]
        new_bufs = []
        for b, v in zip(bs, outs[1 + n_carried:]):
            row = g.expand_dims(cx.t(v), 0)
            idx = g.reshape(i, [1])
            new_bufs.append(g.scatter_with_data(b, row, idx, axis=0, mode="set"))
        return nxt + new_bufs

    res = g.for_loop(0, n_iter, 1, list(init) + bufs, body_fn)
    return list(res)
