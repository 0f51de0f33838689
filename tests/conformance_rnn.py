"""Conformance rows of the recurrent family (single_gate_rnn, lstm, gru), imported by
conformance.py (the rows join conformance.ROWS: every device, static and None dims, gradient
checks).

References: numpy float64 loops written from MPSGraph's documented recurrences
(MPSGraphRNNOps.h: gate orders, peephole on c[t-1], reset-after, flip_z, masks, reverse and
bidirectional) and PyTorch's nn.functional RNN/LSTM/GRU cells (TorchRef: values and every
gradient against torch.autograd) with PyTorch's weights mapped onto MPSGraph's layout.
"""
import numpy as np

from conformance import _COMPOSITE_TOL, FLOATS, Case, Grad, TorchRef, dom, row, torch_module

_ACTS = {
    "none": lambda x: x,
    "relu": lambda x: np.maximum(x, 0),
    "tanh": np.tanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "hard_sigmoid": lambda x: np.clip(0.2 * x + 0.5, 0, 1),
}
_GATES = {"single_gate_rnn": 1, "lstm": 4, "gru": 3}


def _rnn_ref(kind, x, R, W=None, b=None, h0=None, c0=None, mask=None, peephole=None, b2=None, reverse=False,
             bidirectional=False, produce_cell=False, forget_gate_last=False, reset_gate_first=False,
             reset_after=False, flip_z=False, activation=None, input_gate_activation="sigmoid",
             forget_gate_activation="sigmoid", cell_gate_activation="tanh", output_gate_activation=None,
             update_gate_activation="sigmoid", reset_gate_activation="sigmoid"):
    f64 = (lambda a: None if a is None else np.asarray(a, np.float64))
    x, R, W, b, h0, c0, mask, peephole, b2 = map(f64, (x, R, W, b, h0, c0, mask, peephole, b2))
    G, D = _GATES[kind], 2 if bidirectional else 1
    T, N = x.shape[:2]
    H = R.shape[-1]
    xw = x @ W.T if W is not None else x
    if b is not None:
        xw = xw + b
    hs, cs = [], []
    for d in range(D):
        xd = xw[..., d * G * H:(d + 1) * G * H]
        Rd = R[d] if D == 2 else R
        part = (lambda a: a[..., d * H:(d + 1) * H] if (a is not None and D == 2) else a)
        h = part(h0) if h0 is not None else np.zeros((N, H))
        c = part(c0) if c0 is not None else np.zeros((N, H))
        m = 1.0 if mask is None else (part(mask) if mask.shape[-1] == D * H and D == 2 else mask)
        p = None if peephole is None else (peephole[d] if D == 2 else peephole)
        bb = None if b2 is None else part(b2)
        out_h, out_c = [None] * T, [None] * T
        steps = range(T - 1, -1, -1) if (d == 1 or (D == 1 and reverse)) else range(T)
        for t in steps:
            xt = xd[t]
            rec = (h * m) @ Rd.T
            if kind == "single_gate_rnn":
                h = _ACTS[activation or "relu"](xt + rec)
            elif kind == "lstm":
                pre = xt + rec
                if p is not None:
                    pre = pre + np.concatenate([c] * 4, axis=1) * p
                sl = lambda j: pre[:, j * H:(j + 1) * H]  # noqa: E731
                gi, gf, gz = (0, 2, 1) if forget_gate_last else (0, 1, 2)
                i = _ACTS[input_gate_activation](sl(gi))
                f = _ACTS[forget_gate_activation](sl(gf))
                z = _ACTS[cell_gate_activation](sl(gz))
                o = _ACTS[output_gate_activation or "sigmoid"](sl(3))
                c = f * c + i * z
                h = o * _ACTS[activation or "tanh"](c)
            else:
                uz, ur = (1, 0) if reset_gate_first else (0, 1)
                sl = lambda a, j: a[:, j * H:(j + 1) * H]  # noqa: E731
                z = _ACTS[update_gate_activation](sl(rec, uz) + sl(xt, uz))
                r = _ACTS[reset_gate_activation](sl(rec, ur) + sl(xt, ur))
                if reset_after:
                    cand = (sl(rec, 2) + (0 if bb is None else bb)) * r
                else:
                    cand = (h * r * m) @ Rd[2 * H:3 * H].T
                o = _ACTS[output_gate_activation or "tanh"](cand + sl(xt, 2))
                h = (1 - z) * h + z * o if flip_z else z * h + (1 - z) * o
            out_h[t], out_c[t] = h, c
        hs.append(np.stack(out_h) if T else np.zeros((0, N, H)))
        cs.append(np.stack(out_c) if T else np.zeros((0, N, H)))
    h_all = np.concatenate(hs, axis=2)
    if kind == "lstm" and produce_cell:
        return h_all, np.concatenate(cs, axis=2)
    return h_all


_INPUTS = {
    "single_gate_rnn": ("x", "R", "W", "b", "h0", "mask"),
    "lstm": ("x", "R", "W", "b", "h0", "c0", "mask", "peephole"),
    "gru": ("x", "R", "W", "b", "h0", "mask", "b2"),
}
_KW = {"W": "input_weight", "b": "bias", "h0": "init_state", "c0": "init_cell", "mask": "mask",
       "peephole": "peephole", "b2": "secondary_bias"}


def _shapes(kind, T, N, I, H, D, which):
    """The input shapes of `which` (names from _INPUTS) for one configuration."""
    G = _GATES[kind]
    full = {"x": (T, N, I if "W" in which else D * G * H), "R": (2, G * H, H) if D == 2 else (G * H, H),
            "W": (D * G * H, I), "b": (D * G * H,), "h0": (N, D * H), "c0": (N, D * H), "mask": (N, D * H),
            "peephole": (2, 4 * H) if D == 2 else (4 * H,), "b2": (D * H,)}
    return tuple(full[w] for w in which)


def _builder(kind, which):
    def build(g, *ts, **attrs):
        kw = {_KW[w]: t for w, t in zip(which[2:], ts[2:])}
        return getattr(g, kind)(ts[0], ts[1], **kw, **attrs)
    return build


def _ref(kind, which):
    def ref(*arrays, **attrs):
        kw = {w: a for w, a in zip(which[2:], arrays[2:])}
        return _rnn_ref(kind, arrays[0], arrays[1], **kw, **attrs)
    return ref


_TOL = dict(_COMPOSITE_TOL, float32=(1e-4, 1e-5), float16=(2e-2, 5e-3), bfloat16=(1e-1, 5e-2))
_W = dom(lo=-0.8, hi=0.8)


def _rows(kind, configs):
    """One row per set of inputs present; configs: (which, label, T, N, I, H, D, attrs, grad?)."""
    groups = {}
    for which, label, T, N, I, H, D, attrs, grad in configs:
        groups.setdefault(which, []).append((label, T, N, I, H, D, attrs, grad))
    for which, cfgs in groups.items():
        cases = [Case(_shapes(kind, T, N, I, H, D, which), dict(attrs, bidirectional=True) if D == 2 else attrs,
                      label=label) for label, T, N, I, H, D, attrs, _ in cfgs]
        grad_cases = tuple(label for label, *_, grad in cfgs if grad)
        out = (lambda d: (d, d)) if any(a.get("produce_cell") for *_, a, _ in cfgs) else None
        row(f"{kind}_{'_'.join(which[2:]) or 'plain'}", _builder(kind, which), _ref(kind, which), FLOATS, cases,
            doms=_W, tol=_TOL, covers=(kind,), out_dtype=out,
            grad=Grad(cases=grad_cases) if grad_cases else None)


_ALL1 = ("x", "R", "W", "b", "h0", "mask")
_rows("single_gate_rnn", [
    (("x", "R"), "no input weight", 4, 2, 0, 3, 1, {}, True),
    (("x", "R"), "no input weight bidi", 3, 2, 0, 3, 2, {"activation": "tanh"}, True),
    (("x", "R", "W", "b", "h0"), "tanh", 5, 3, 4, 3, 1, {"activation": "tanh"}, True),
    (("x", "R", "W", "b", "h0"), "reverse sigmoid", 4, 2, 3, 2, 1, {"reverse": True, "activation": "sigmoid"}, True),
    (("x", "R", "W", "b", "h0"), "bidirectional relu", 4, 2, 3, 2, 2, {"bidirectional": True}, False),
    (("x", "R", "W", "b", "h0"), "hard_sigmoid", 3, 2, 3, 2, 1, {"activation": "hard_sigmoid"}, False),
    (("x", "R", "W", "b", "h0"), "none", 3, 2, 3, 2, 1, {"activation": "none"}, False),
    (("x", "R", "W", "b", "h0"), "T=0", 0, 2, 3, 2, 1, {}, False),
    (("x", "R", "W", "b", "h0"), "N=0", 3, 0, 3, 2, 1, {}, False),
    (_ALL1, "mask", 4, 2, 3, 3, 1, {"activation": "tanh"}, True),
])
_rows("lstm", [
    (("x", "R"), "no input weight", 3, 2, 0, 2, 1, {}, True),
    (("x", "R", "W", "b", "h0", "c0"), "default", 5, 3, 4, 3, 1, {}, True),
    (("x", "R", "W", "b", "h0", "c0"), "produce_cell", 4, 2, 3, 2, 1, {"produce_cell": True}, True),
    (("x", "R", "W", "b", "h0", "c0"), "forget_gate_last reverse", 4, 2, 3, 2, 1,
     {"forget_gate_last": True, "reverse": True}, True),
    (("x", "R", "W", "b", "h0", "c0"), "bidirectional cell", 4, 2, 3, 2, 2,
     {"bidirectional": True, "produce_cell": True}, True),
    (("x", "R", "W", "b", "h0", "c0"), "activations", 3, 2, 3, 2, 1,
     {"input_gate_activation": "hard_sigmoid", "cell_gate_activation": "relu", "activation": "sigmoid"}, False),
    (("x", "R", "W", "b", "h0", "c0"), "T=0", 0, 2, 3, 2, 1, {"produce_cell": True}, False),
    (("x", "R", "W", "b", "h0", "c0", "mask", "peephole"), "mask peephole", 4, 2, 3, 2, 1, {"produce_cell": True}, True),
    (("x", "R", "W", "b", "h0", "c0", "mask", "peephole"), "mask peephole bidi", 3, 2, 3, 2, 2,
     {"bidirectional": True, "produce_cell": True}, True),
])
_rows("gru", [
    (("x", "R"), "no input weight", 3, 2, 0, 2, 1, {}, True),
    (("x", "R", "W", "b", "h0"), "default", 5, 3, 4, 3, 1, {}, True),
    (("x", "R", "W", "b", "h0"), "reset_gate_first flip_z", 4, 2, 3, 2, 1, {"reset_gate_first": True, "flip_z": True},
     True),
    (("x", "R", "W", "b", "h0"), "bidirectional reverse", 3, 2, 3, 2, 2, {"bidirectional": True}, True),
    (("x", "R", "W", "b", "h0"), "T=0", 0, 2, 3, 2, 1, {}, False),
    (("x", "R", "W", "b", "h0", "mask", "b2"), "reset_after", 4, 2, 3, 2, 1, {"reset_after": True}, True),
    (("x", "R", "W", "b", "h0", "mask", "b2"), "reset_after bidi", 3, 2, 3, 2, 2,
     {"reset_after": True, "bidirectional": True, "reverse": True}, True),
    (("x", "R", "W", "b", "h0", "mask", "b2"), "reset before, mask", 4, 2, 3, 2, 1, {"output_gate_activation": "relu"},
     True),
])


# ----------------------------------------------------------------------------------------
# against PyTorch's layers: PyTorch's weights in MPSGraph's layout, cells from torch.nn.functional's
# building blocks (torch._VF through nn.LSTM / nn.GRU / nn.RNN with the same weights)


def _torch_layer(kind, bidirectional, nonlinearity="tanh"):
    torch = torch_module()

    def fn(x, w_ih, w_hh, b_ih, b_hh, h0, c0=None):
        T, N, I = x.shape
        D = 2 if bidirectional else 1
        H = w_hh.shape[-1]
        cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}.get(kind)
        if cls is None:
            mod = torch.nn.RNN(I, H, nonlinearity=nonlinearity, bidirectional=bidirectional).double()
        else:
            mod = cls(I, H, bidirectional=bidirectional).double()
        G = w_ih.shape[0] // (D * H)
        params = {}
        for d in range(D):
            sfx = "_reverse" if d else ""
            params[f"weight_ih_l0{sfx}"] = w_ih[d * G * H:(d + 1) * G * H]
            params[f"weight_hh_l0{sfx}"] = w_hh[d] if D == 2 else w_hh
            params[f"bias_ih_l0{sfx}"] = b_ih[d * G * H:(d + 1) * G * H]
            params[f"bias_hh_l0{sfx}"] = b_hh[d * G * H:(d + 1) * G * H]
        h0t = h0.reshape(N, D, H).transpose(0, 1).contiguous()
        state = (h0t, c0.reshape(N, D, H).transpose(0, 1).contiguous()) if kind == "lstm" else h0t
        out, _ = torch.func.functional_call(mod, params, (x, state))
        return out
    return fn


def _vs_torch_build(kind, bidirectional):
    """mpsgraph's op with PyTorch's parameters mapped: LSTM bias = b_ih + b_hh; GRU reset_gate_first,
    reset_after, bias = b_ih + [b_hr, b_hz, 0], secondary_bias = b_hn; RNN activation tanh."""
    def build(g, x, w_ih, w_hh, b_ih, b_hh, h0, c0=None):
        D = 2 if bidirectional else 1
        if kind == "lstm":
            return g.lstm(x, w_hh, input_weight=w_ih, bias=b_ih + b_hh, init_state=h0, init_cell=c0,
                          bidirectional=bidirectional)
        if kind == "single_gate_rnn":
            return g.single_gate_rnn(x, w_hh, input_weight=w_ih, bias=b_ih + b_hh, init_state=h0,
                                     bidirectional=bidirectional, activation="tanh")
        H = w_hh.shape[-1]
        parts, b2 = [], []
        for d in range(D):
            o = d * 3 * H
            parts += [b_ih[o:o + 2 * H] + b_hh[o:o + 2 * H], b_ih[o + 2 * H:o + 3 * H]]
            b2.append(b_hh[o + 2 * H:o + 3 * H])
        bias = g.concat(parts, axis=0)
        b2 = b2[0] if D == 1 else g.concat(b2, axis=0)
        return g.gru(x, w_hh, input_weight=w_ih, bias=bias, init_state=h0, secondary_bias=b2,
                     reset_gate_first=True, reset_after=True, bidirectional=bidirectional)
    return build


for _kind, _G in (("lstm", 4), ("gru", 3), ("single_gate_rnn", 1)):
    for _bidi in (False, True):
        _D = 2 if _bidi else 1
        T, N, I, H = 5, 3, 4, 3
        _shp = [(T, N, I), (_D * _G * H, I), (2, _G * H, H) if _bidi else (_G * H, H), (_D * _G * H,), (_D * _G * H,),
                (N, _D * H)]
        if _kind == "lstm":
            _shp.append((N, _D * H))
        row(f"{_kind}_{'bidirectional_' if _bidi else ''}vs_torch", _vs_torch_build(_kind, _bidi),
            TorchRef(_torch_layer(_kind.replace("single_gate_rnn", "rnn"), _bidi)), ("float32", "float64"),
            [Case(tuple(_shp))], doms=_W, tol=_TOL, covers=(_kind,), grad=Grad(cases=()),
            # the vjp is built with the placeholders' dims; unrolling needs the sequence length
            # (the numpy rows run the None-dims forward)
            none_variant=False)
