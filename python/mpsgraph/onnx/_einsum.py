"""ONNX Einsum as transposes, reductions and batched matrix products (pairwise, left to right)."""
import numpy as np


def _parse(cx, equation, ranks):
    eq = equation.replace(" ", "")
    if "->" in eq:
        lhs, out = eq.split("->")
    else:
        lhs, out = eq, None
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        cx.fail(f"equation {equation!r} has {len(terms)} operands, {len(ranks)} given")
    free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" if c not in eq]
    ell_rank = max([r - len(t.replace("...", "")) for t, r in zip(terms, ranks) if "..." in t] or [0])
    ell = "".join(free[:ell_rank])
    subs = []
    for t, r in zip(terms, ranks):
        if "..." in t:
            n = r - len(t.replace("...", ""))
            t = t.replace("...", ell[ell_rank - n:])
        if len(t) != r:
            cx.fail(f"operand subscripts {t!r} do not match its rank {r}")
        subs.append(t)
    if out is None:
        counts = {}
        for s in subs:
            for c in s:
                counts[c] = counts.get(c, 0) + 1
        out = ell + "".join(sorted(c for c, k in counts.items() if k == 1 and c not in ell))
    else:
        out = out.replace("...", ell)
    return subs, out


def _reduce_single(cx, t, s, keep):
    """Sums out the letters of s not in keep; repeated letters (diagonals) are not supported."""
    if len(set(s)) != len(s):
        cx.unsupported(f"Einsum with a repeated subscript in {s!r} (diagonals)")
    axes = [i for i, c in enumerate(s) if c not in keep]
    if axes:
        t = cx.g.reduction_sum(t, axes=axes, keep_dims=False)
        s = "".join(c for c in s if c in keep)
    return t, s


def _contract(cx, a, sa, b, sb, keep):
    g = cx.g
    batch = [c for c in sa if c in sb and c in keep]
    contr = [c for c in sa if c in sb and c not in keep]
    left = [c for c in sa if c not in sb]
    right = [c for c in sb if c not in sa]

    def dims(t, s, letters):
        return [t.shape[s.index(c)] for c in letters]

    a = g.transpose(a, [sa.index(c) for c in batch + left + contr])
    b = g.transpose(b, [sb.index(c) for c in batch + contr + right])
    bd, ld, cd = dims(a, "".join(batch + left + contr), batch), dims(a, "".join(batch + left + contr), left), \
        dims(a, "".join(batch + left + contr), contr)
    rd = dims(b, "".join(batch + contr + right), right)
    for group in (bd, ld, cd, rd):
        if any(d is None for d in group):
            cx.unsupported("Einsum needs static dims")
    nb, nl, nc, nr = (int(np.prod(x, dtype=np.int64)) for x in (bd, ld, cd, rd))
    a3 = g.reshape(a, [nb, nl, nc])
    b3 = g.reshape(b, [nb, nc, nr])
    y = g.reshape(g.matrix_multiplication(a3, b3), bd + ld + rd)
    return y, "".join(batch + left + right)


def einsum(cx, equation, ts):
    subs, out = _parse(cx, equation, [t.ndim for t in ts])
    g = cx.g
    cur, cs = None, None
    for i, (t, s) in enumerate(zip(ts, subs)):
        later = out + "".join(subs[i + 1:])
        t, s = _reduce_single(cx, t, s, later + (cs or ""))
        if cur is None:
            cur, cs = t, s
            continue
        cur, cs = _reduce_single(cx, cur, cs, later + s)
        cur, cs = _contract(cx, cur, cs, t, s, later)
    cur, cs = _reduce_single(cx, cur, cs, out)
    if sorted(cs) != sorted(out):
        cx.fail(f"equation {equation!r}: output subscripts {out!r} are not all in the operands")
    perm = [cs.index(c) for c in out]
    return g.transpose(cur, perm) if perm != list(range(len(perm))) else g.identity(cur)
