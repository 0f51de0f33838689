"""Conformance rows of the attention family (scaled_dot_product_attention), imported by
conformance.py (the rows join conformance.ROWS: every device, static and None dims, gradient
checks).

References: a numpy float64 formula (key/value heads repeated with np.repeat for grouped
queries, masks applied to the scores, a stable softmax; a query that attends no key gives NaN)
and PyTorch's torch.nn.functional.scaled_dot_product_attention (TorchRef: values and every
gradient against torch.autograd). The long cases span several of the CPU kernel's query and key
blocks (32 x 64), causal ones included.
"""
import numpy as np

from conformance import _COMPOSITE_TOL, FLOATS, Case, Dom, Grad, TorchRef, dom, np_dtype, row, torch_module


def _sdpa_ref(q, k, v, mask=None, scale=None, causal=False):
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    if q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        group = q.shape[-3] // k.shape[-3]
        k, v = np.repeat(k, group, axis=-3), np.repeat(v, group, axis=-3)
    L, S = q.shape[-2], k.shape[-2]
    out_shape = np.broadcast_shapes(q.shape[:-1], v.shape[:-2] + (L,)) + (v.shape[-1],)
    if S == 0:
        return np.zeros(out_shape)
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    if causal:
        s = np.where(np.tril(np.ones((L, S), bool)), s, -np.inf)
    with np.errstate(invalid="ignore"):
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        p = e / e.sum(axis=-1, keepdims=True)
    return np.matmul(p, v)


def _torch_sdpa(q, k, v, mask=None, scale=None, causal=False):
    F = torch_module().nn.functional
    gqa = q.dim() >= 3 and k.shape[-3] != q.shape[-3]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale, enable_gqa=gqa)


class _KeepFirst(Dom):
    """A bool mask (or a -inf / finite additive one) that always lets key 0 through, so that no
    query loses every key (that case is its own, NaN, row)."""

    def __init__(self, additive=False):
        super().__init__()
        self.additive = additive

    def draw(self, rng, shape, dtype):
        keep = rng.random(shape) < 0.6
        keep[..., 0] = True
        if not self.additive:
            return keep
        vals = rng.uniform(-2, 2, shape)
        return np.where(keep, vals, -np.inf).astype(np_dtype(dtype))


class _KeepFirst01(_KeepFirst):
    """The same masks as float64 0/1 (the finite-difference harness feeds float64 only): the
    bool rows' builder turns them into bool."""

    def draw(self, rng, shape, dtype):
        return super().draw(rng, shape, "bool").astype(np.float64)


def _sdpa_bool_mask(g, q, k, v, m, **a):
    if m.dtype.name != "bool":
        m = g.not_equal(m, 0.0)
    return g.scaled_dot_product_attention(q, k, v, mask=m, **a)


def _sdpa(g, q, k, v, **a):
    return g.scaled_dot_product_attention(q, k, v, **a)


def _sdpa_mask(g, q, k, v, m, **a):
    return g.scaled_dot_product_attention(q, k, v, mask=m, **a)


_TOL = dict(_COMPOSITE_TOL, float32=(5e-5, 5e-6))
_QKV = dom(lo=-2, hi=2)

_PLAIN = [
    Case(((2, 3, 5, 4), (2, 3, 6, 4), (2, 3, 6, 4)), label="bhld"),
    Case(((5, 4), (7, 4), (7, 3)), label="rank2"),
    Case(((2, 5, 4), (2, 7, 4), (2, 7, 6)), label="rank3 Dv != D"),
    Case(((2, 4, 5, 8), (2, 2, 7, 8), (2, 2, 7, 8)), label="gqa"),
    Case(((1, 6, 3, 4), (1, 2, 4, 4), (1, 2, 4, 5)), {"causal": True}, label="gqa causal"),
    Case(((1, 2, 6, 4), (1, 2, 6, 4), (1, 2, 6, 4)), {"causal": True}, label="causal"),
    Case(((1, 2, 7, 4), (1, 2, 4, 4), (1, 2, 4, 4)), {"causal": True}, label="causal L > S"),
    Case(((1, 2, 3, 4), (1, 2, 8, 4), (1, 2, 8, 4)), {"causal": True}, label="causal L < S"),
    Case(((2, 3, 4), (2, 5, 4), (2, 5, 4)), {"scale": 0.3}, label="scale"),
    Case(((3, 2, 2, 3, 4), (3, 2, 2, 5, 4), (3, 2, 2, 5, 2)), label="two batch dims"),
    Case(((1, 2, 70, 16), (1, 2, 150, 16), (1, 2, 150, 8)), label="long"),
    Case(((1, 1, 100, 8), (1, 1, 100, 8), (1, 1, 100, 8)), {"causal": True}, label="long causal"),
    Case(((2, 0, 4), (2, 3, 4), (2, 3, 5)), label="L=0"),
    Case(((2, 3, 4), (2, 0, 4), (2, 0, 5)), label="S=0"),
    Case(((0, 2, 3, 4), (0, 2, 5, 4), (0, 2, 5, 4)), label="batch 0"),
]
row("scaled_dot_product_attention", _sdpa, _sdpa_ref, FLOATS, _PLAIN, doms=_QKV, tol=_TOL,
    covers=("scaled_dot_product_attention",),
    grad=Grad(cases=("bhld", "gqa", "causal", "rank3 Dv != D", "scale"), second_order=("bhld",),
              unknown_dims=("bhld", "causal")))

_MASKED = [
    Case(((2, 3, 5, 4), (2, 3, 6, 4), (2, 3, 6, 4), (5, 6)), label="mask (L, S)"),
    Case(((2, 3, 5, 4), (2, 3, 6, 4), (2, 3, 6, 4), (2, 1, 5, 6)), label="mask per batch"),
    Case(((2, 3, 5, 4), (2, 3, 6, 4), (2, 3, 6, 4), (1, 6)), label="mask per key"),
    Case(((2, 4, 5, 4), (2, 2, 6, 4), (2, 2, 6, 4), (4, 5, 6)), label="gqa mask per head"),
    Case(((1, 2, 4, 4), (1, 2, 4, 4), (1, 2, 4, 4), (4, 4)), {"causal": True}, label="mask and causal"),
    Case(((1, 1, 40, 8), (1, 1, 130, 8), (1, 1, 130, 8), (40, 130)), label="long"),
]
row("scaled_dot_product_attention_bool_mask", _sdpa_bool_mask, _sdpa_ref, FLOATS, _MASKED,
    doms=(_QKV, _QKV, _QKV, _KeepFirst()), input_dtypes=lambda d: (d, d, d, "bool"), tol=_TOL,
    covers=("scaled_dot_product_attention",),
    grad=Grad(wrt=(0, 1, 2), cases=("mask (L, S)", "gqa mask per head"), unknown_dims=("mask (L, S)",),
              doms=(_QKV, _QKV, _QKV, _KeepFirst01())))
row("scaled_dot_product_attention_additive_mask", _sdpa_mask, _sdpa_ref, FLOATS, _MASKED,
    doms=(_QKV, _QKV, _QKV, _KeepFirst(additive=True)), tol=_TOL, covers=("scaled_dot_product_attention",),
    grad=Grad(wrt=(0, 1, 2), cases=("mask per batch",)))
row("scaled_dot_product_attention_additive_mask_finite", _sdpa_mask, _sdpa_ref, FLOATS,
    [Case(((2, 3, 5, 4), (2, 3, 6, 4), (2, 3, 6, 4), (3, 5, 6)))], doms=_QKV, tol=_TOL,
    covers=("scaled_dot_product_attention",), grad=Grad())  # the mask's own gradient too

# a query whose every key is masked: softmax over only -inf is NaN (as numpy and the decomposition)
row("scaled_dot_product_attention_all_masked", _sdpa_bool_mask, _sdpa_ref, FLOATS, [
    Case(values=(np.ones((1, 3, 3)), np.ones((1, 4, 3)), np.arange(8.0).reshape(1, 4, 2),
                 np.array([[True, False, False, False], [False, False, False, False], [True, True, True, True]])),
         label="row 1 sees nothing")], input_dtypes=lambda d: (d, d, d, "bool"), tol=_TOL,
    covers=("scaled_dot_product_attention",))

# against PyTorch: values and gradients (torch.autograd) of the same calls
row("scaled_dot_product_attention_vs_torch", _sdpa, TorchRef(_torch_sdpa), ("float32", "float64"),
    [c for c in _PLAIN if "=0" not in c.label and "0" != c.label[-1]], doms=_QKV, tol=_TOL,
    covers=("scaled_dot_product_attention",), grad=Grad(cases=()))
row("scaled_dot_product_attention_mask_vs_torch", _sdpa_bool_mask, TorchRef(_torch_sdpa), ("float32", "float64"),
    [c for c in _MASKED if not c.attrs.get("causal")], doms=(_QKV, _QKV, _QKV, _KeepFirst()),
    input_dtypes=lambda d: (d, d, d, "bool"), tol=_TOL, covers=("scaled_dot_product_attention",),
    grad=Grad(wrt=(0, 1, 2), cases=()))


# the gradient node itself (what the forward's gradient rule emits): d query, d key, d value (and
# d mask) of sum(output_gradient * attention(...)), against torch.autograd; its own gradient
# (second order, through its decomposition) by finite differences and torch's double backward
def _sdpa_grad(g, q, k, v, dout, *m, **a):
    mask = m[0] if m else None
    out = g.scaled_dot_product_attention(q, k, v, mask=mask, **{n: x for n, x in a.items() if n != "mask_gradient"})
    return g.scaled_dot_product_attention_gradient(q, k, v, out, dout, mask=mask, **a)


def _torch_sdpa_grad(q, k, v, dout, *m, mask_gradient=False, **a):
    torch = torch_module()
    q, k, v = (t.detach().clone().requires_grad_(True) if not t.requires_grad else t for t in (q, k, v))
    mask = m[0] if m else None
    if mask is not None and mask_gradient and not mask.requires_grad:
        mask = mask.detach().clone().requires_grad_(True)
    wrt = (q, k, v) + ((mask,) if mask_gradient else ())
    attn = mask
    if mask is not None and a.get("causal"):  # torch refuses is_causal with a mask: fold it in
        a = {**a, "causal": False}
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        attn = mask & keep if mask.dtype == torch.bool else mask.masked_fill(~keep, float("-inf"))
    y = _torch_sdpa(q, k, v, attn, **a)
    return torch.autograd.grad(y, wrt, dout, create_graph=True)


_GRAD_CASES = [
    Case(((2, 3, 5, 4), (2, 3, 6, 4), (2, 3, 6, 4), (2, 3, 5, 4)), label="bhld"),
    Case(((2, 4, 5, 8), (2, 2, 7, 8), (2, 2, 7, 6), (2, 4, 5, 6)), label="gqa"),
    Case(((1, 6, 40, 4), (1, 2, 70, 4), (1, 2, 70, 5), (1, 6, 40, 5)), {"causal": True}, label="gqa causal long"),
    Case(((1, 2, 100, 8), (1, 2, 100, 8), (1, 2, 100, 8), (1, 2, 100, 8)), {"causal": True}, label="long causal"),
    Case(((2, 3, 4), (2, 5, 4), (2, 5, 4), (2, 3, 4)), {"scale": 0.3}, label="scale"),
    Case(((5, 4), (7, 4), (7, 3), (5, 3)), label="rank2"),
]
row("scaled_dot_product_attention_gradient", _sdpa_grad, TorchRef(_torch_sdpa_grad), ("float32", "float64"),
    _GRAD_CASES, doms=_QKV, tol=_TOL, covers=("scaled_dot_product_attention_gradient",),
    grad=Grad(wrt=(0, 1, 2, 3), cases=("bhld", "gqa"), vjp=False))

_GRAD_MASKED = [
    Case(((2, 3, 5, 4), (2, 3, 6, 4), (2, 3, 6, 4), (2, 3, 5, 4), (5, 6)), label="mask (L, S)"),
    Case(((2, 4, 5, 4), (2, 2, 6, 4), (2, 2, 6, 4), (2, 4, 5, 4), (4, 5, 6)), label="gqa mask per head"),
    Case(((2, 3, 5, 4), (2, 3, 6, 4), (2, 3, 6, 4), (2, 3, 5, 4), (2, 1, 5, 6)), label="mask per batch"),
    Case(((2, 3, 5, 4), (2, 3, 6, 4), (2, 3, 6, 4), (2, 3, 5, 4), (1, 6)), label="mask per key"),
    Case(((1, 1, 40, 8), (1, 1, 130, 8), (1, 1, 130, 8), (1, 1, 40, 8), (40, 130)), {"causal": True},
         label="long causal"),
]
row("scaled_dot_product_attention_gradient_bool_mask", _sdpa_grad, TorchRef(_torch_sdpa_grad),
    ("float32", "float64"), _GRAD_MASKED, doms=(_QKV, _QKV, _QKV, _QKV, _KeepFirst()),
    input_dtypes=lambda d: (d, d, d, d, "bool"), tol=_TOL, covers=("scaled_dot_product_attention_gradient",))
# an additive mask's own gradient: the scores' gradient summed over the dims the mask broadcasts along
row("scaled_dot_product_attention_gradient_mask", _sdpa_grad, TorchRef(_torch_sdpa_grad), ("float32", "float64"),
    [Case(c.shapes, {**c.attrs, "mask_gradient": True}, label=c.label) for c in _GRAD_MASKED],
    doms=_QKV, tol=_TOL, covers=("scaled_dot_product_attention_gradient",),
    grad=Grad(wrt=(0, 1, 2, 3, 4), cases=("mask (L, S)",), vjp=False))
