"""Conformance rows of tile_gradient (tile's adjoint: dy summed over the repeats), imported by
conformance.py. The reference views dy as (m0, d0, m1, d1, ...) and sums the m axes in float64
(integers wrap in their own dtype, as the kernels' sums do)."""
import numpy as np

from conformance import NUMERIC, Case, Grad, dom, row


def _tile_gradient_ref(dy, like, multiples):
    inter = []
    for m, d in zip(multiples, like.shape):
        inter += [m, d]
    axes = tuple(range(0, 2 * len(multiples), 2))
    if np.issubdtype(dy.dtype, np.integer):
        return dy.reshape(inter).sum(axis=axes, dtype=dy.dtype).reshape(like.shape)
    return dy.astype(np.float64).reshape(inter).sum(axis=axes).reshape(like.shape)


def _tiled(shape, multiples):
    return tuple(d * m for d, m in zip(shape, multiples))


_TILE_CASES = [((2, 3), (2, 3)), ((4,), (3,)), ((2, 1, 3), (1, 4, 2)), ((), ()), ((3, 2), (1, 1)),
               ((2, 0, 3), (2, 2, 1)), ((2, 3), (0, 2)), ((1, 2, 1, 2, 3), (2, 1, 3, 1, 2)), ((5, 300), (3, 1))]

row("tile_gradient", "tile_gradient", _tile_gradient_ref, NUMERIC,
    [Case((_tiled(sh, m), sh), {"multiples": m}) for sh, m in _TILE_CASES]
    + [Case(((4, 6), (2, 2)), {"multiples": (2, 3)}, label="fd")],
    doms=dom(ilo=-10, ihi=10), grad=Grad(cases=("fd",), second_order=True, wrt=(0,)))
