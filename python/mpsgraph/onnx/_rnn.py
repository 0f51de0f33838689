"""ONNX LSTM, GRU and RNN decomposed into the graph's matrix products and activations, unrolled
over the (static) sequence length: the input projection of every step is one matrix product, each
step adds the recurrent one. The result is an ordinary differentiable graph."""
import numpy as np


def _act(cx, name, alpha, beta):
    g = cx.g
    n = name.lower()
    if n == "sigmoid":
        return g.sigmoid
    if n == "tanh":
        return g.tanh
    if n == "relu":
        return g.relu
    if n == "hardsigmoid":
        a, b = (0.2 if alpha is None else alpha), (0.5 if beta is None else beta)
        return lambda x: g.clamp(x * a + b, 0.0, 1.0)
    if n == "leakyrelu":
        return lambda x: g.leaky_relu(x, alpha=0.01 if alpha is None else alpha)
    if n == "thresholdedrelu":
        a = 1.0 if alpha is None else alpha
        return lambda x: g.select(g.greater_than(x, a), x, x * 0.0)
    if n == "scaledtanh":
        return lambda x: g.tanh(x * (1.0 if beta is None else beta)) * (1.0 if alpha is None else alpha)
    if n == "affine":
        return lambda x: x * (1.0 if alpha is None else alpha) + (0.0 if beta is None else beta)
    if n == "elu":
        return lambda x: g.elu(x, alpha=1.0 if alpha is None else alpha)
    if n == "softsign":
        return g.softsign
    if n == "softplus":
        return g.softplus
    cx.unsupported(f"activation {name!r}")


def _activations(cx, a, per_dir, defaults, ndir):
    names = list(a.get("activations", defaults * ndir))
    if len(names) == per_dir:
        names = names * ndir
    if len(names) != per_dir * ndir:
        cx.fail(f"activations {names} must have {per_dir * ndir} entries")
    alphas = list(a.get("activation_alpha", []))
    betas = list(a.get("activation_beta", []))
    out = []
    for i, n in enumerate(names):
        out.append(_act(cx, n, alphas[i] if i < len(alphas) else None, betas[i] if i < len(betas) else None))
    return [out[d * per_dir:(d + 1) * per_dir] for d in range(ndir)]


def _rnn_common(cx, node, ins, a, kind):
    g = cx.g
    x = cx.t(ins[0])
    layout = int(a.get("layout", 0))
    if layout:
        x = g.transpose(x, [1, 0, 2])
    T, B = x.shape[0], x.shape[1]
    if T is None:
        cx.unsupported(f"{kind} needs a static sequence length")
    H = int(a["hidden_size"]) if "hidden_size" in a else None
    w, r = cx.t(ins[1]), cx.t(ins[2])
    ngates = {"LSTM": 4, "GRU": 3, "RNN": 1}[kind]
    if H is None:
        H = r.shape[-1]
    direction = a.get("direction", "forward")
    ndir = 2 if direction == "bidirectional" else 1
    if direction not in ("forward", "reverse", "bidirectional"):
        cx.fail(f"unknown direction {direction!r}")
    if w.shape[0] != ndir:
        cx.fail(f"W has {w.shape[0]} directions, direction {direction!r} needs {ndir}")
    b = ins[3] if len(ins) > 3 else None
    lens = ins[4] if len(ins) > 4 else None
    h0 = ins[5] if len(ins) > 5 else None
    c0 = ins[6] if len(ins) > 6 and kind == "LSTM" else None
    p = ins[7] if len(ins) > 7 and kind == "LSTM" else None
    if layout and h0 is not None:
        h0 = g.transpose(cx.t(h0), [1, 0, 2])
    if layout and c0 is not None:
        c0 = g.transpose(cx.t(c0), [1, 0, 2])
    mask = None
    if lens is not None:
        if isinstance(lens, np.ndarray) and np.all(lens == T):
            lens = None
        else:
            if direction != "forward":
                cx.unsupported(f"sequence_lens with direction {direction!r}")
            lt = g.reshape(g.cast(cx.t(lens), "int32"), [-1, 1])
            mask = [g.less_than(g.constant(np.int32(t)), lt) for t in range(T)]
    clip = a.get("clip")
    acts = _activations(cx, a, {"LSTM": 3, "GRU": 2, "RNN": 1}[kind],
                        {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}[kind],
                        ndir)
    dt = x.dtype
    ys, hs, cs = [], [], []
    for d in range(ndir):
        rev = direction == "reverse" or d == 1
        wd = g.reshape(g.slice(w, 0, d, 1), [ngates * H, -1])
        rd = g.reshape(g.slice(r, 0, d, 1), [ngates * H, H])
        xw = g.matrix_multiplication(x, g.transpose(wd, [1, 0]))  # (T, B, gates*H)
        bias_r = None
        if b is not None:
            bd = g.reshape(g.slice(cx.t(b), 0, d, 1), [2 * ngates * H])
            bw, br = g.slice(bd, 0, 0, ngates * H), g.slice(bd, 0, ngates * H, ngates * H)
            if kind == "GRU" and a.get("linear_before_reset", 0):
                xw = xw + bw
                bias_r = br
            else:
                xw = xw + (bw + br)
        zeros = g.zeros([B, H], dtype=dt) if B is not None else None
        h = g.reshape(g.slice(cx.t(h0), 0, d, 1), [-1, H]) if h0 is not None else zeros
        c = g.reshape(g.slice(cx.t(c0), 0, d, 1), [-1, H]) if c0 is not None else zeros
        if h is None:
            cx.unsupported(f"{kind} with an unknown batch dim and no initial_h")
        if kind == "LSTM" and c is None:
            cx.unsupported("LSTM with an unknown batch dim and no initial_c")
        pd = None
        if p is not None:
            pd = g.reshape(g.slice(cx.t(p), 0, d, 1), [3, H])
        rt = g.transpose(rd, [1, 0])
        steps = range(T - 1, -1, -1) if rev else range(T)
        out = [None] * T
        for t in steps:
            xt = g.reshape(g.slice(xw, 0, t, 1), [-1, ngates * H])
            hr = g.matrix_multiplication(h, rt)
            if kind == "LSTM":
                h_new, c_new = _lstm_step(cx, a, acts[d], xt, hr, c, pd, H, clip)
            elif kind == "GRU":
                h_new, c_new = _gru_step(cx, a, acts[d], xt, h, rd, bias_r, H, clip), None
            else:
                pre = xt + hr
                if clip is not None:
                    pre = g.clamp(pre, -float(clip), float(clip))
                h_new, c_new = acts[d][0](pre), None
            if mask is not None:
                m = mask[t]
                h = g.select(m, h_new, h)
                if c_new is not None:
                    c = g.select(m, c_new, c)
                out[t] = g.select(m, h_new, h_new * 0.0)
            else:
                h = h_new
                c = c_new if c_new is not None else c
                out[t] = h_new
        ys.append(g.stack(out, axis=0))  # (T, B, H)
        hs.append(h)
        cs.append(c)
    y = g.stack(ys, axis=1)  # (T, ndir, B, H)
    yh = g.stack(hs, axis=0)
    yc = g.stack(cs, axis=0) if kind == "LSTM" else None
    if layout:
        y = g.transpose(y, [2, 0, 1, 3])
        yh = g.transpose(yh, [1, 0, 2])
        if yc is not None:
            yc = g.transpose(yc, [1, 0, 2])
    return [y, yh] + ([yc] if kind == "LSTM" else [])


def _lstm_step(cx, a, acts, xt, hr, c, pd, H, clip):
    g = cx.g
    f, gg, hh = acts
    pre = xt + hr
    if clip is not None:
        pre = g.clamp(pre, -float(clip), float(clip))
    i_, o_, f_, c_ = (g.slice(pre, 1, k * H, H) for k in range(4))
    if pd is not None:
        pi, po, pf = (g.reshape(g.slice(pd, 0, k, 1), [H]) for k in range(3))
        i_ = i_ + c * pi
        f_ = f_ + c * pf
    it = f(i_)
    ft = 1.0 - it if a.get("input_forget", 0) else f(f_)
    ct = gg(c_)
    c_new = ft * c + it * ct
    if pd is not None:
        o_ = o_ + c_new * po
    ot = f(o_)
    return ot * hh(c_new), c_new


def _gru_step(cx, a, acts, xt, h, rd, bias_r, H, clip):
    g = cx.g
    f, gg = acts
    rz = g.slice(rd, 0, 0, H)
    rr = g.slice(rd, 0, H, H)
    rh = g.slice(rd, 0, 2 * H, H)
    xz, xr, xh = (g.slice(xt, 1, k * H, H) for k in range(3))

    def clipped(v):
        return g.clamp(v, -float(clip), float(clip)) if clip is not None else v
    hz = g.matrix_multiplication(h, g.transpose(rz, [1, 0]))
    hrr = g.matrix_multiplication(h, g.transpose(rr, [1, 0]))
    if bias_r is not None:
        hz = hz + g.slice(bias_r, 0, 0, H)
        hrr = hrr + g.slice(bias_r, 0, H, H)
    z = f(clipped(xz + hz))
    r = f(clipped(xr + hrr))
    if a.get("linear_before_reset", 0):
        hh = g.matrix_multiplication(h, g.transpose(rh, [1, 0]))
        if bias_r is not None:
            hh = hh + g.slice(bias_r, 0, 2 * H, H)
        ht = gg(clipped(xh + r * hh))
    else:
        ht = gg(clipped(xh + g.matrix_multiplication(r * h, g.transpose(rh, [1, 0]))))
    return (1.0 - z) * ht + z * h


def register(op):
    for kind in ("LSTM", "GRU", "RNN"):
        op(kind, fold=False)(lambda cx, node, ins, a, kind=kind: _rnn_common(cx, node, ins, a, kind))
