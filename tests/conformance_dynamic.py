"""Conformance rows of the ops with data-dependent output shapes (imported by conformance.py; the
rows join conformance.ROWS and run on every device, with static and None placeholder dims).

Their results' leading dim is known only once the op has run, so the static shape holds None
there (`static_shape=False`: the harness checks the dtype statically and the shape on the
result). The reference is numpy's argwhere (int64 there; mpsgraph gives int32, as MPSGraph's
nonZeroIndicesOfTensor does).
"""
import numpy as np

from conformance import _INF, _NAN, ALL, FLOATS, Case, dom, np_dtype, row


def _argwhere(x):
    return np.argwhere(x).astype(np.int32)


def _zeros(shape):
    return lambda d: np.zeros(shape, np_dtype(d))


def _ones(shape):
    return lambda d: np.ones(shape, np_dtype(d))


_CASES = [
    Case(((7,),)), Case(((3, 4),)), Case(((2, 3, 4),)), Case(((2, 1, 3, 2),)),
    Case(((),), label="rank-0"),
    Case(((0,),), label="zero-size"), Case(((3, 0, 2),), label="zero-size inner"),
    Case(values=(_zeros((2, 3)),), label="no non-zero"),
    Case(values=(_zeros(()),), label="rank-0 zero"),
    Case(values=(_ones((2, 2)),), label="all non-zero"),
    Case(((300, 500),), label="several chunks"),
    # NaN and the infinities count as non-zero, -0.0 as zero
    Case(values=([_NAN, 0.0, -0.0, _INF, -_INF, 0.5, -0.0, 1e-30],), dtypes=FLOATS, label="special values"),
    Case(values=([[0.0, -0.0], [_NAN, 0.0]],), dtypes=FLOATS, label="special values 2-D"),
]

# values in {-1, 0, 1}: about a third zero
row("non_zero_indices", "non_zero_indices", _argwhere, ALL, _CASES,
    doms=dom(lo=-1.4, hi=1.4, integral=True, ilo=-1, ihi=1), out_dtype="int32", static_shape=False, exact=True)
# integer extremes and the smallest subnormal-free values are non-zero
row("non_zero_indices_extremes", "non_zero_indices", _argwhere, ("int8", "int64", "uint8", "uint64"), [
    Case(values=(lambda d: np.array([0, np.iinfo(np_dtype(d)).max, np.iinfo(np_dtype(d)).min, 0, 1],
                                    np_dtype(d)),), label="dtype extremes")],
    out_dtype="int32", static_shape=False, exact=True)
