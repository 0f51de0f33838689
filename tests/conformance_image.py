"""Conformance rows of the image family (sample_grid, im_to_col, col_to_im, hamming_distance), imported
by conformance.py (the rows join conformance.ROWS: every device, static and None dims, gradient checks).

References: numpy written from PyTorch's definitions (grid_sample's unnormalisation, reflection and
clipping; F.unfold / F.fold's window order; popcounts by np.unpackbits) and, in the *_vs_torch rows,
PyTorch itself with torch.autograd for the gradients.
"""
import numpy as np

from conformance import FLOATS, INTS, NUMERIC, Case, Grad, TorchRef, _CallDom, dom, np_dtype, row, torch_module

# ----------------------------------------------------------------------------------------
# sample_grid


def _reflect(v, lo, hi):
    if hi <= lo:
        return np.zeros_like(v)
    span = hi - lo
    a = np.abs(v - lo)
    flips = np.floor(a / span)
    extra = a - flips * span
    return np.where(flips % 2 == 0, extra + lo, span - extra + lo)


def _source(v, n, padding_mode, align_corners):
    s = (v + 1) / 2 * (n - 1) if align_corners else ((v + 1) * n - 1) / 2
    if padding_mode == "border":
        s = np.clip(s, 0, n - 1)
    elif padding_mode == "reflection":
        s = _reflect(s, 0, n - 1) if align_corners else _reflect(s, -0.5, n - 0.5)
        s = np.clip(s, 0, n - 1)
    return s


def _grid_sample_ref(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False):
    x, grid = np.asarray(x, np.float64), np.asarray(grid, np.float64)
    n, c, h, w = x.shape
    ix = _source(grid[..., 0], w, padding_mode, align_corners)  # (N, Ho, Wo)
    iy = _source(grid[..., 1], h, padding_mode, align_corners)
    out = np.zeros((n, c) + grid.shape[1:3])
    bidx = np.arange(n)[:, None, None]

    def tap(xi, yi, wgt):
        ok = (xi >= 0) & (xi <= w - 1) & (yi >= 0) & (yi <= h - 1)
        xc = np.clip(xi, 0, max(w - 1, 0)).astype(np.int64)
        yc = np.clip(yi, 0, max(h - 1, 0)).astype(np.int64)
        px = x[bidx, :, yc, xc]  # (N, Ho, Wo, C)
        return np.moveaxis(px * np.where(ok, wgt, 0.0)[..., None], -1, 1)

    if x.size == 0 or out.size == 0:
        return out
    if mode == "nearest":
        return tap(np.rint(ix), np.rint(iy), np.ones_like(ix))
    x0, y0 = np.floor(ix), np.floor(iy)
    wx1, wy1 = ix - x0, iy - y0
    for dx, wx in ((0, 1 - wx1), (1, wx1)):
        for dy, wy in ((0, 1 - wy1), (1, wy1)):
            out += tap(x0 + dx, y0 + dy, wx * wy)
    return out


def _t_grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False):
    return torch_module().nn.functional.grid_sample(x, grid, mode=mode, padding_mode=padding_mode,
                                                     align_corners=align_corners)


GRID = _CallDom(lambda rng, shape, dtype: rng.uniform(-1.3, 1.3, size=shape).astype(np_dtype(dtype)))
IMG = dom(lo=-2, hi=2)
_SG_MODES = [(m, p, a) for m in ("bilinear", "nearest") for p in ("zeros", "border", "reflection") for a in (False, True)]
_SG_CASES = [Case(((2, 3, 5, 4), (2, 6, 7, 2)), {"mode": m, "padding_mode": p, "align_corners": a})
             for m, p, a in _SG_MODES] + [
    Case(((1, 1, 1, 1), (1, 3, 2, 2)), {"padding_mode": "reflection"}, label="one pixel"),
    Case(((1, 2, 3, 3), (1, 0, 4, 2)), label="zero-size grid"),
    Case(((2, 0, 3, 3), (2, 2, 2, 2)), label="no channels"),
    Case(((2, 4, 30, 40), (2, 20, 25, 2)), {"align_corners": True}, label="large"),
    Case(values=(np.arange(12.0).reshape(1, 1, 3, 4),
                 np.array([[[[-1.0, -1.0], [1.0, 1.0], [0.0, 0.0], [-1.2, 0.5], [3.0, -2.5]]]])),
         attrs={"padding_mode": "reflection"}, label="exact points"),
]
# bilinear cases for finite differences: x, and the grid away from pixel boundaries (floor is
# constant there)
_SG_GRAD = Grad(cases=(0, 2, 4, 6, 8), second_order=(0,), unknown_dims=(2,), rtol=1e-5, atol=1e-7)
# float32 source coordinates carry an error of about eps * size, times the image's slope (up to 4
# per pixel here): a few 1e-6 absolute
row("sample_grid", "sample_grid", _grid_sample_ref, FLOATS, _SG_CASES, doms=(IMG, GRID),
    tol={"float32": (1e-5, 3e-5)}, grad=_SG_GRAD)
row("sample_grid_vs_torch", "sample_grid", TorchRef(_t_grid_sample), ("float32", "float64"),
    [Case(((2, 3, 6, 5), (2, 4, 3, 2)), {"mode": m, "padding_mode": p, "align_corners": a}) for m, p, a in _SG_MODES],
    doms=(IMG, GRID), tol={"float32": (1e-5, 1e-5)}, grad=Grad(cases=()))
row("alias_grid_sample", "grid_sample", _grid_sample_ref, ("float32",), [Case(((1, 2, 3, 3), (1, 2, 2, 2)))],
    doms=(IMG, GRID))

# ----------------------------------------------------------------------------------------
# im_to_col / col_to_im


def _windows(shape, kernel_sizes, strides, dilation_rates, padding):
    """(row index, column index, pixel y, pixel x) of every window tap, F.unfold's order."""
    _, c, h, w = shape
    (kh, kw), (sh, sw), (dh, dw), (pt, pb, pl, pr) = kernel_sizes, strides, dilation_rates, padding
    bh = (h + pt + pb - (dh * (kh - 1) + 1)) // sh + 1
    bw = (w + pl + pr - (dw * (kw - 1) + 1)) // sw + 1
    taps = []
    for ch in range(c):
        for i in range(kh):
            for j in range(kw):
                for by in range(bh):
                    for bx in range(bw):
                        taps.append((ch, (ch * kh + i) * kw + j, by * bw + bx, by * sh - pt + i * dh,
                                     bx * sw - pl + j * dw))
    return np.array(taps, np.int64).reshape(-1, 5), bh * bw


def _im_to_col_ref(x, kernel_sizes, strides=(1, 1), dilation_rates=(1, 1), padding=(0, 0, 0, 0)):
    x = np.asarray(x)
    kh, kw = kernel_sizes
    t, blocks = _windows(x.shape, kernel_sizes, strides, dilation_rates, padding)
    out = np.zeros((x.shape[0], x.shape[1] * kh * kw, blocks), x.dtype)
    ok = (t[:, 3] >= 0) & (t[:, 3] < x.shape[2]) & (t[:, 4] >= 0) & (t[:, 4] < x.shape[3])
    t = t[ok]
    out[:, t[:, 1], t[:, 2]] = x[:, t[:, 0], t[:, 3], t[:, 4]]
    return out


def _col_to_im_ref(cols, output_size, kernel_sizes, strides=(1, 1), dilation_rates=(1, 1), padding=(0, 0, 0, 0)):
    cols = np.asarray(cols)
    kh, kw = kernel_sizes
    shape = (cols.shape[0], cols.shape[1] // (kh * kw)) + tuple(output_size)
    t, _ = _windows(shape, kernel_sizes, strides, dilation_rates, padding)
    ok = (t[:, 3] >= 0) & (t[:, 3] < shape[2]) & (t[:, 4] >= 0) & (t[:, 4] < shape[3])
    t = t[ok]
    acc = np.zeros(shape, np.float64 if cols.dtype.kind == "f" else np.int64)
    vals = cols[:, t[:, 1], t[:, 2]].astype(acc.dtype)
    for b in range(shape[0]):
        np.add.at(acc[b], (t[:, 0], t[:, 3], t[:, 4]), vals[b])
    return acc if cols.dtype.kind == "f" else acc.astype(cols.dtype)  # integers wrap in their dtype


_WIN = [({"kernel_sizes": (2, 2)}, (1, 2, 4, 5)),
        ({"kernel_sizes": (3, 2), "strides": (2, 1)}, (2, 3, 7, 4)),
        ({"kernel_sizes": (2, 3), "dilation_rates": (2, 1), "padding": (1, 0, 2, 1)}, (1, 2, 5, 6)),
        ({"kernel_sizes": (3, 3), "strides": (2, 2), "padding": (1, 1, 1, 1)}, (2, 1, 6, 6)),
        ({"kernel_sizes": (1, 1)}, (1, 3, 2, 2)),
        ({"kernel_sizes": (2, 2), "strides": (3, 3)}, (1, 1, 7, 8))]


def _cols_shape(attrs, image):
    return _im_to_col_ref(np.zeros(image), **attrs).shape


row("im_to_col", "im_to_col", _im_to_col_ref, NUMERIC,
    [Case((img,), a) for a, img in _WIN] + [Case(((0, 2, 4, 4),), {"kernel_sizes": (2, 2)}, label="zero batch"),
                                            Case(((2, 8, 20, 20),), {"kernel_sizes": (3, 3)}, label="large")],
    exact=True, grad=Grad(cases=(0, 2, 3), second_order=(2,), unknown_dims=(3,)))
row("alias_unfold", "unfold", _im_to_col_ref, ("float32",), [Case(((1, 2, 4, 4),), {"kernel_sizes": (2, 2)})],
    exact=True)
row("im_to_col_vs_torch", "im_to_col",
    TorchRef(lambda x, kernel_sizes, strides=(1, 1), dilation_rates=(1, 1), padding=(0, 0, 0, 0):
             torch_module().nn.functional.unfold(x, kernel_sizes, dilation_rates, (padding[0], padding[2]), strides)),
    ("float32", "float64"), [Case((img,), a) for a, img in _WIN if a.get("padding", (0, 0, 0, 0))[::2] ==
                             a.get("padding", (0, 0, 0, 0))[1::2]], exact=True, grad=Grad(cases=()))

_FOLD = [Case((_cols_shape(a, img),), {**a, "output_size": img[2:]}) for a, img in _WIN]
row("col_to_im", "col_to_im", _col_to_im_ref, FLOATS + INTS,
    _FOLD + [Case(((0, 8, 12),), {"kernel_sizes": (2, 2), "output_size": (4, 5)}, label="zero batch")],
    doms=dom(lo=-2, hi=2, ilo=-100, ihi=100), grad=Grad(cases=(0, 2, 3), second_order=(2,), unknown_dims=(3,)))
# the gradient of im_to_col onto the shape of `like` (usable with unknown dims)
def _im_to_col_gradient_ref(dy, like, **attrs):
    return _col_to_im_ref(dy, np.shape(like)[2:], **attrs)


row("im_to_col_gradient", "im_to_col_gradient", _im_to_col_gradient_ref, FLOATS,
    [Case((_cols_shape(a, img), img), a) for a, img in _WIN], doms=dom(lo=-2, hi=2),
    grad=Grad(wrt=(0,), cases=(0, 2), second_order=(2,), unknown_dims=(2,)))
row("col_to_im_vs_torch", "col_to_im",
    TorchRef(lambda x, output_size, kernel_sizes, strides=(1, 1), dilation_rates=(1, 1), padding=(0, 0, 0, 0):
             torch_module().nn.functional.fold(x, output_size, kernel_sizes, dilation_rates, (padding[0], padding[2]),
                                               strides)),
    ("float32", "float64"), [c for c, (a, _) in zip(_FOLD, _WIN) if a.get("padding", (0, 0, 0, 0))[::2] ==
                             a.get("padding", (0, 0, 0, 0))[1::2]], tol={"float32": (1e-6, 1e-6)}, grad=Grad(cases=()))

# ----------------------------------------------------------------------------------------
# hamming_distance


def _hamming_ref(x, y, dtype="uint32"):
    x, y = np.asarray(x), np.asarray(y)
    d = x[..., :, None, :] ^ y[..., None, :, :]
    bits = np.unpackbits(np.ascontiguousarray(d).view(np.uint8).reshape(d.shape + (d.dtype.itemsize,)), axis=-1)
    return bits.reshape(d.shape[:-1] + (d.shape[-1] * d.dtype.itemsize * 8,)).sum(axis=-1).astype(dtype)


_FULL = dom(full_int=True)
_HAM = [Case(((3, 4), (5, 4))), Case(((2, 3, 6), (2, 4, 6))), Case(((2, 1, 3, 2), (4, 5, 2)), label="broadcast batch"),
        Case(((0, 3), (2, 3)), label="zero rows"), Case(((3, 0), (2, 0)), label="empty vectors"),
        Case(((64, 32), (48, 32)), label="large")]
row("hamming_distance", "hamming_distance", _hamming_ref, INTS, _HAM, doms=_FULL, out_dtype="uint32", exact=True)
row("hamming_distance_uint16", "hamming_distance", _hamming_ref, ("int32", "uint8"),
    [Case(c.shapes, {"dtype": "uint16"}, label=c.label) for c in _HAM], doms=_FULL, out_dtype="uint16", exact=True)

# ----------------------------------------------------------------------------------------
# non_maximum_suppression


def _nms_ref(boxes, scores, iou_threshold=0.5, score_threshold=-np.inf, per_class_suppression=False,
             coordinate_mode="corners_height_first"):
    boxes, scores = np.asarray(boxes, np.float64), np.asarray(scores, np.float64)
    n, b = scores.shape[:2]
    out = np.full((n, b), -1, np.int32)
    v = boxes.copy()
    if coordinate_mode.endswith("width_first"):
        v = v[..., [1, 0, 3, 2]]
    if coordinate_mode.startswith("centers"):
        y0, x0, y1, x1 = v[..., 0] - v[..., 2] / 2, v[..., 1] - v[..., 3] / 2, v[..., 0] + v[..., 2] / 2, \
            v[..., 1] + v[..., 3] / 2
    else:
        y0, y1 = np.minimum(v[..., 0], v[..., 2]), np.maximum(v[..., 0], v[..., 2])
        x0, x1 = np.minimum(v[..., 1], v[..., 3]), np.maximum(v[..., 1], v[..., 3])
    for i in range(n):
        if scores.shape[2] == 0:
            continue
        best, cls = scores[i].max(axis=-1), scores[i].argmax(axis=-1)
        cand = [j for j in np.argsort(-best, kind="stable")
                if not np.isnan(scores[i, j]).any() and best[j] > score_threshold]
        kept = []
        for j in cand:
            ok = True
            for k in kept:
                if per_class_suppression and cls[k] != cls[j]:
                    continue
                h = min(y1[i, j], y1[i, k]) - max(y0[i, j], y0[i, k])
                w = min(x1[i, j], x1[i, k]) - max(x0[i, j], x0[i, k])
                inter = h * w if h > 0 and w > 0 else 0.0
                union = (y1[i, j] - y0[i, j]) * (x1[i, j] - x0[i, j]) + (y1[i, k] - y0[i, k]) * (x1[i, k] - x0[i, k]) \
                    - inter
                if union > 0 and inter / union > iou_threshold:
                    ok = False
                    break
            if ok:
                kept.append(j)
        out[i, :len(kept)] = kept
    return out


def _boxes(rng, shape, dtype):
    """Clustered boxes (many overlaps): corners for the corner modes, (centre, size) otherwise."""
    if shape[-1] != 4:  # scores: distinct values (no ties)
        return (rng.permutation(int(np.prod(shape))).reshape(shape) / max(1, np.prod(shape))).astype(np_dtype(dtype))
    start = rng.uniform(0, 6, size=shape[:-1] + (2,))
    size = rng.uniform(1, 4, size=shape[:-1] + (2,))
    return np.concatenate([start, start + size], -1).astype(np_dtype(dtype))


_BOX = _CallDom(_boxes)
_NMS = [Case(((2, 12, 4), (2, 12, 1)), {}),
        Case(((2, 12, 4), (2, 12, 1)), {"iou_threshold": 0.2, "score_threshold": 0.3}),
        Case(((1, 15, 4), (1, 15, 3)), {"iou_threshold": 0.3}, label="classes"),
        Case(((1, 15, 4), (1, 15, 3)), {"iou_threshold": 0.3, "per_class_suppression": True}, label="per class"),
        Case(((2, 10, 4), (2, 10, 1)), {"coordinate_mode": "corners_width_first", "iou_threshold": 0.25}),
        Case(((2, 10, 4), (2, 10, 1)), {"coordinate_mode": "centers_height_first", "iou_threshold": 0.25}),
        Case(((2, 10, 4), (2, 10, 2)), {"coordinate_mode": "centers_width_first", "iou_threshold": 0.25}),
        Case(((0, 5, 4), (0, 5, 1)), label="zero batch"), Case(((2, 0, 4), (2, 0, 1)), label="no boxes"),
        Case(((3, 200, 4), (3, 200, 1)), {"iou_threshold": 0.4}, label="large"),
        Case(values=([[[0, 0, 2, 2], [2, 2, 0, 0], [0, 0, 2, 2], [5, 5, 6, 6], [0, 0, 1, 2]]],
                     [[[0.9], [0.9], [np.nan], [0.1], [0.95]]]), attrs={"iou_threshold": 0.5}, label="ties, nan, flips")]
row("non_maximum_suppression", "non_maximum_suppression", _nms_ref, ("float32", "float64", "float16"), _NMS,
    doms=(_BOX, _BOX), out_dtype="int32", exact=True)
row("alias_nms", "nms", _nms_ref, ("float32",), [Case(((1, 6, 4), (1, 6, 1)))], doms=(_BOX, _BOX), out_dtype="int32",
    exact=True)

# ----------------------------------------------------------------------------------------
# stencil


def _boundary_index(p, n, mode):
    """(index, sign) per read position p of a dim of n (index -1: the constant), numpy's pad modes
    (reflect, symmetric, wrap, edge) and the anti-periodic extension of wrap."""
    inside = (p >= 0) & (p < n)
    sign = np.ones(p.shape)
    if mode == "clamp_to_edge":
        idx = np.clip(p, 0, n - 1)
    elif mode == "reflect":
        q = np.mod(p, 2 * (n - 1)) if n > 1 else np.zeros_like(p)
        idx = np.where(q < n, q, 2 * (n - 1) - q)
    elif mode == "symmetric":
        q = np.mod(p, 2 * n)
        idx = np.where(q < n, q, 2 * n - 1 - q)
    elif mode in ("periodic", "anti_periodic"):
        idx = np.mod(p, n)
        if mode == "anti_periodic":
            sign = np.where(np.floor_divide(p, n) % 2 == 0, 1.0, -1.0)
    else:
        idx = np.where(inside, p, -1)
    return np.where(inside, p, idx), np.where(inside, 1.0, sign)


def _stencil_ref(x, w, reduction_mode="sum", strides=(1, 1, 1, 1), dilation_rates=(1, 1, 1, 1), padding=(0,) * 8,
                 padding_style="explicit", offsets=(0, 0, 0, 0), boundary_mode="zero", padding_constant=0.0):
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    lead, dims = x.shape[:-4], x.shape[-4:]
    pad = list(padding)
    outs, reads = [], []
    for d in range(4):
        n, k, s, dl = dims[d], w.shape[d], strides[d], dilation_rates[d]
        span = dl * (k - 1) + 1
        if padding_style == "valid":
            pad[2 * d] = pad[2 * d + 1] = 0
        elif padding_style == "same":
            o = -(-n // s)
            total = max((o - 1) * s + span - n, 0)
            pad[2 * d], pad[2 * d + 1] = total // 2, total - total // 2
        o = (n + pad[2 * d] + pad[2 * d + 1] - span) // s + 1
        off = offsets[d] if padding_style == "explicit_offset" else 0
        p = np.arange(o)[:, None] * s + np.arange(k)[None, :] * dl - pad[2 * d] + off  # (out, tap)
        reads.append(_boundary_index(p, n, boundary_mode))
        outs.append(o)
    fill = padding_constant if boundary_mode == "constant" else 0.0
    xf = x.reshape((int(np.prod(lead)),) + dims)
    ix = [r[0] for r in reads]
    sg = [r[1] for r in reads]
    # (batch, o0, o1, o2, o3, k0, k1, k2, k3) gathered values
    i0 = ix[0][:, None, None, None, :, None, None, None]
    i1 = ix[1][None, :, None, None, None, :, None, None]
    i2 = ix[2][None, None, :, None, None, None, :, None]
    i3 = ix[3][None, None, None, :, None, None, None, :]
    sign = (sg[0][:, None, None, None, :, None, None, None] * sg[1][None, :, None, None, None, :, None, None] *
            sg[2][None, None, :, None, None, None, :, None] * sg[3][None, None, None, :, None, None, None, :])
    outside = (i0 < 0) | (i1 < 0) | (i2 < 0) | (i3 < 0)
    vals = xf[:, np.maximum(i0, 0), np.maximum(i1, 0), np.maximum(i2, 0), np.maximum(i3, 0)]
    vals = np.where(outside, fill, vals * sign) * w
    red = {"sum": np.sum, "product": np.prod, "min": np.min, "max": np.max}[reduction_mode]
    r = red(vals.reshape(vals.shape[:5] + (-1,)), axis=-1) if vals.size else np.zeros((xf.shape[0],) + tuple(outs))
    return r.reshape(lead + tuple(outs))


_W = _CallDom(lambda rng, shape, dtype: rng.uniform(0.5, 1.5, size=shape).astype(np_dtype(dtype)))
_ST = [Case(((1, 1, 5, 6), (1, 1, 3, 3)), {}),
       Case(((2, 1, 5, 6), (1, 1, 3, 2)), {"padding": (0, 0, 0, 0, 1, 1, 2, 1)}, label="zero padding"),
       Case(((1, 2, 3, 5, 6), (1, 2, 2, 3)), {"strides": (1, 1, 2, 2), "dilation_rates": (1, 1, 1, 2)},
            label="batch, strides, dilation")] + [
    Case(((1, 2, 4, 5), (1, 2, 3, 3)), {"padding": (0, 0, 1, 0, 2, 3, 1, 4), "boundary_mode": b, "reduction_mode": m,
                                        "padding_constant": 0.75}, label=f"{b} {m}")
    for b in ("constant", "zero", "clamp_to_edge", "reflect", "symmetric", "periodic", "anti_periodic")
    for m in ("sum", "max")] + [
    Case(((1, 1, 6, 7), (1, 1, 3, 2)), {"padding_style": "same", "strides": (1, 1, 2, 3), "boundary_mode": "reflect"},
         label="same"),
    Case(((1, 1, 6, 7), (1, 1, 3, 2)), {"padding_style": "valid", "padding": (1,) * 8}, label="valid"),
    Case(((1, 1, 6, 7), (1, 1, 2, 2)), {"padding_style": "explicit_offset", "offsets": (0, 0, 1, -1),
                                        "padding": (0, 0, 0, 0, 0, 1, 1, 0), "boundary_mode": "clamp_to_edge"},
         label="offsets"),
    Case(((1, 1, 4, 4), (1, 1, 2, 2)), {"reduction_mode": "product"}, label="product"),
    Case(((1, 1, 4, 4), (1, 1, 2, 3)), {"reduction_mode": "min", "boundary_mode": "symmetric",
                                        "padding": (0, 0, 0, 0, 1, 1, 1, 1)}, label="min"),
    Case(((0, 1, 1, 4, 4), (1, 1, 2, 2)), label="zero batch"),
    Case(((2, 3, 24, 30), (1, 2, 3, 3)), {"padding": (0, 0, 0, 1, 1, 1, 1, 1), "boundary_mode": "periodic"},
         label="large")]
row("stencil", "stencil", _stencil_ref, FLOATS, _ST, doms=(dom(lo=-2, hi=2), _W),
    tol={"float32": (1e-5, 1e-5)})
