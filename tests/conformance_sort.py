"""Conformance rows of the sort family (sort, arg_sort, top_k, bottom_k) and the cumulative
family (cumulative_sum, cumulative_product, cumulative_minimum, cumulative_maximum), imported by
conformance.py (the rows join conformance.ROWS: every device, static and None dims, gradient
checks).

References are numpy only: orders from np.argsort(kind="stable") on ranks (np.unique, so NaN
ranks above +inf and -0.0 ties with 0.0; descending sorts the negated ranks, so ties keep their
index order), top-k / bottom-k as the first k of those orders, and the scans as ufunc.accumulate
(integers wrap in their dtype, NaN propagates through minimum/maximum) with exclusive and reverse
done by hand (flip, shift in the identity).
"""
import numpy as np

from conformance import ALL, FLOATS, INTS, NUMERIC, Case, Dom, Grad, _CallDom, _INF, _NAN, dom, np_dtype, row


class _Distinct(Dom):
    """Values without ties, at least 0.37 apart (sort, top-k and running extremes are smooth there)."""

    def draw(self, rng, shape, dtype):
        n = int(np.prod(shape))
        return (rng.permutation(n).reshape(shape) * 0.37 - n * 0.15).astype(np_dtype(dtype))


DISTINCT = _Distinct()
TIES = dom(lo=-3, hi=3, integral=True, ilo=-3, ihi=3)  # many equal keys: stability shows
FULL = dom(full_int=True, lo=-100, hi=100)
# Apple documents neither the order of equal keys nor the place of NaN in MPSGraph's sort and top-k
# (docs/metal.md): rows whose indices depend on them are CPU facts; *_distinct rows check Metal
_MPS_ORDER = {"metal": "MPSGraph's order of equal keys and of NaN is undocumented (docs/metal.md)"}


# ----------------------------------------------------------------------------------------
# sort, arg_sort, top_k, bottom_k


def _order(x, axis, descending):
    """Positions sorting x along axis: stable, NaN above +inf, ties in index order either way."""
    x = np.asarray(x)
    if x.size == 0:
        return np.zeros(x.shape, np.int64)
    _, inv = np.unique(x.reshape(-1), return_inverse=True)  # NaNs share the top rank
    ranks = inv.reshape(x.shape).astype(np.int64)
    return np.argsort(-ranks if descending else ranks, axis=axis, kind="stable")


def _sort_ref(x, axis=-1, descending=False):
    return np.take_along_axis(x, _order(x, axis, descending), axis=axis)


def _arg_sort_ref(x, axis=-1, descending=False):
    return _order(x, axis, descending).astype(np.int32)


def _k_ref(descending):
    def ref(x, k, axis=-1):
        idx = np.take(_order(x, axis, descending), np.arange(k), axis=axis)
        return np.take_along_axis(x, idx, axis=axis), idx.astype(np.int32)
    return ref


_SORT_CASES = [
    Case(((7,),), {}), Case(((7,),), {"descending": True}),
    Case(((3, 5),), {"axis": 0}), Case(((3, 5),), {"axis": 1, "descending": True}),
    Case(((3, 5),), {"axis": -2, "descending": True}),
    Case(((2, 3, 4),), {"axis": 1}), Case(((2, 3, 4),), {"axis": 1, "descending": True}),
    Case(((2, 3, 4),), {}, label="default axis -1"),
    Case(((1,),), {}), Case(((0, 4),), {"axis": 1}, label="zero-size"),
    Case(((3, 0),), {"axis": 1, "descending": True}, label="zero-size axis"),
    Case(((40, 300),), {"axis": 1}, label="parallel"), Case(((300, 40),), {"axis": 0, "descending": True}),
]
# NaN (several), infinities and signed zeros: NaN last ascending / first descending; -0.0 and
# 0.0 keep their order (signbit compared)
_SPECIAL = [[3.0, _NAN, -0.0, 1.0, 0.0, -_INF, _NAN, _INF, -0.0, -1.0],
            [_NAN, _NAN, 2.0, 2.0, -_INF, _INF, 0.0, -0.0, 0.0, 5.0]]
_SORT_SPECIAL = [Case(values=(_SPECIAL,), attrs={"axis": 1}), Case(values=(_SPECIAL,), attrs={"descending": True}),
                 Case(values=(_SPECIAL,), attrs={"axis": 0, "descending": True})]
_EDGES = [Case(values=(lambda d: np.array([[np.iinfo(np_dtype(d)).max, 0, np.iinfo(np_dtype(d)).min, 1,
                                             np.iinfo(np_dtype(d)).max, np.iinfo(np_dtype(d)).min]], np_dtype(d)),),
               attrs={"descending": desc}, label="dtype extremes") for desc in (False, True)]

for _name, _dom in (("", TIES), ("_full", FULL)):
    row("sort" + _name, "sort", _sort_ref, ALL, _SORT_CASES, doms=_dom, exact=True, signbit=True,
        grad=Grad(cases=(1, 3, 5), second_order=(3,), unknown_dims=(5,), doms=DISTINCT) if not _name else None)
    row("arg_sort" + _name, "arg_sort", _arg_sort_ref, ALL, _SORT_CASES, doms=_dom, out_dtype="int32",
        skip_devices=_MPS_ORDER)
row("sort_special", "sort", _sort_ref, FLOATS, _SORT_SPECIAL, exact=True, signbit=True, skip_devices=_MPS_ORDER)
row("arg_sort_special", "arg_sort", _arg_sort_ref, FLOATS, _SORT_SPECIAL, out_dtype="int32", skip_devices=_MPS_ORDER)
row("sort_dtype_extremes", "sort", _sort_ref, INTS, _EDGES, exact=True)
row("arg_sort_dtype_extremes", "arg_sort", _arg_sort_ref, INTS, _EDGES, out_dtype="int32",
    skip_devices=_MPS_ORDER)


def _distinct_ints(rng, shape, dtype):
    """A permutation of small integers (distinct in every dtype, bfloat16 included), centred for signed dtypes."""
    n = int(np.prod(shape))
    v = rng.permutation(n) - (n // 2 if np.dtype(np_dtype(dtype)).kind in "fi" else 0)
    return v.reshape(shape).astype(np_dtype(dtype))


# no ties and no NaN: the same on every backend whatever the sort's stability
_DISTINCT_CASES = [Case(((9,),), {}), Case(((9,),), {"descending": True}), Case(((4, 6),), {"axis": 0}),
                   Case(((4, 6),), {"axis": 1, "descending": True}), Case(((2, 5, 3),), {"axis": 1})]
_K_DISTINCT_CASES = [Case(((9,),), {"k": 3}), Case(((4, 6),), {"k": 2}), Case(((4, 6),), {"k": 4, "axis": 0}),
                     Case(((2, 5, 3),), {"k": 5, "axis": 1})]
row("arg_sort_distinct", "arg_sort", _arg_sort_ref, NUMERIC, _DISTINCT_CASES, doms=_CallDom(_distinct_ints),
    out_dtype="int32")

_K_CASES = [
    Case(((9,),), {"k": 3}), Case(((9,),), {"k": 9}), Case(((9,),), {"k": 0}, label="k 0"),
    Case(((4, 6),), {"k": 2}), Case(((4, 6),), {"k": 3, "axis": 0}), Case(((4, 6),), {"k": 1, "axis": -2}),
    Case(((2, 5, 3),), {"k": 4, "axis": 1}), Case(((0, 5),), {"k": 2}, label="zero-size"),
    Case(((3, 0),), {"k": 0}, label="zero-size axis"), Case(((50, 400),), {"k": 7}, label="parallel"),
]
_K_SPECIAL = [Case(values=(_SPECIAL,), attrs={"k": 4}), Case(values=(_SPECIAL,), attrs={"k": 1, "axis": 0}),
              Case(values=(_SPECIAL,), attrs={"k": 10})]


def _k_out(d):
    return d, "int32"


_K_GRAD = Grad(cases=(0, 3, 4, 6), second_order=(3,), unknown_dims=(4,), doms=DISTINCT)
for _op, _desc in (("top_k", True), ("bottom_k", False)):
    row(_op, _op, _k_ref(_desc), ALL, _K_CASES, doms=TIES, out_dtype=_k_out, exact=True, signbit=True, grad=_K_GRAD,
        skip_devices=_MPS_ORDER)
    row(_op + "_full", _op, _k_ref(_desc), NUMERIC, _K_CASES[:7], doms=FULL, out_dtype=_k_out, exact=True,
        skip_devices=_MPS_ORDER)
    row(_op + "_special", _op, _k_ref(_desc), FLOATS, _K_SPECIAL, out_dtype=_k_out, exact=True, signbit=True,
        skip_devices=_MPS_ORDER)
    row(_op + "_distinct", _op, _k_ref(_desc), NUMERIC, _K_DISTINCT_CASES, doms=_CallDom(_distinct_ints),
        out_dtype=_k_out, exact=True)


# ----------------------------------------------------------------------------------------
# cumulative_sum, cumulative_product, cumulative_minimum, cumulative_maximum


def _identity(kind, dt):
    if kind == "sum":
        return 0
    if kind == "prod":
        return 1
    if dt.kind == "f":
        return np.inf if kind == "min" else -np.inf
    info = np.iinfo(dt)
    return info.max if kind == "min" else info.min


def _scan_ref(kind):
    acc = {"sum": lambda x, a: np.cumsum(x, axis=a, dtype=x.dtype),
           "prod": lambda x, a: np.cumprod(x, axis=a, dtype=x.dtype),
           "min": lambda x, a: np.minimum.accumulate(x, axis=a),
           "max": lambda x, a: np.maximum.accumulate(x, axis=a)}[kind]

    def ref(x, axis=0, exclusive=False, reverse=False):
        x = np.asarray(x)
        if reverse:
            x = np.flip(x, axis)
        y = acc(x, axis)
        if exclusive and x.shape[axis] > 0:
            first = np.full(np.take(x, [0], axis=axis).shape, _identity(kind, x.dtype), x.dtype)
            y = np.concatenate([first, np.take(y, np.arange(x.shape[axis] - 1), axis=axis)], axis=axis)
        if reverse:
            y = np.flip(y, axis)
        return y
    return ref


_SCAN_CASES = [
    Case(((6,),), {}), Case(((6,),), {"exclusive": True}), Case(((6,),), {"reverse": True}),
    Case(((6,),), {"exclusive": True, "reverse": True}),
    Case(((3, 5),), {"axis": 1}), Case(((3, 5),), {"axis": -1, "exclusive": True, "reverse": True}),
    Case(((3, 5),), {}, label="default axis 0"), Case(((2, 3, 4),), {"axis": 1, "reverse": True}),
    Case(((2, 3, 4),), {"axis": 1, "exclusive": True}), Case(((2, 3, 4),), {"axis": 2}),
    Case(((0, 4),), {"axis": 1}, label="zero-size"), Case(((3, 0),), {"axis": 1, "exclusive": True}),
    Case(((1,),), {"exclusive": True}, label="one element, exclusive"),
    Case(((30, 700),), {"axis": 0, "reverse": True}, label="parallel, inner"),
    Case(((700, 30),), {"axis": 1, "exclusive": True}, label="parallel, lines"),
]
_SCAN_TOL = {"float16": (4e-3, 4e-3), "bfloat16": (2e-2, 2e-2), "float32": (1e-5, 1e-5), "float64": (1e-12, 1e-12)}
_SCAN_SPECIAL = [[1.0, _NAN, 2.0, -1.0, _INF], [_INF, 1.0, -_INF, 0.0, 3.0], [-0.0, 2.0, -3.0, _NAN, 1.0]]
_SCAN_SPECIAL_CASES = [Case(values=(_SCAN_SPECIAL,), attrs={"axis": 1, "exclusive": e, "reverse": r})
                       for e in (False, True) for r in (False, True)]
# products of values near 1 stay finite and meaningful over long axes; zeros in the grad cases
_PROD_DOM = _CallDom(lambda rng, s, d: (rng.uniform(0.8, 1.25, s) if np_dtype(d).kind == "f"
                                        else rng.integers(-3, 4, s)).astype(np_dtype(d)))
_ZEROS = [[0.5, 2.0, 0.0, 1.5, -0.7, 0.0, 3.0], [1.2, 0.0, -0.9, 2.0, 0.0, 1.1, 0.8],
          [-1.3, 0.6, 1.4, -2.0, 0.9, 1.7, 0.0]]
_PROD_GRAD_CASES = [Case(values=(_ZEROS,), attrs={"axis": 1, "exclusive": e, "reverse": r}, dtypes=FLOATS,
                         label=f"zeros {e} {r}") for e in (False, True) for r in (False, True)]
_SCAN_GRAD = dict(cases=(0, 1, 2, 3, 5, 7, 8), second_order=(0, 5, 8), unknown_dims=(5, 8))

row("cumulative_sum", "cumulative_sum", _scan_ref("sum"), NUMERIC, _SCAN_CASES, doms=FULL, tol=_SCAN_TOL,
    grad=Grad(**_SCAN_GRAD))
row("cumulative_product", "cumulative_product", _scan_ref("prod"), NUMERIC, _SCAN_CASES + _PROD_GRAD_CASES,
    doms=_PROD_DOM, tol=_SCAN_TOL,
    grad=Grad(cases=_SCAN_GRAD["cases"] + tuple(c.label for c in _PROD_GRAD_CASES), second_order=(0, 5, 8),
              unknown_dims=(5, "zeros True True"), doms=dom(lo=0.5, hi=1.5)))
# wrap-around over the full integer range
row("cumulative_product_wrap", "cumulative_product", _scan_ref("prod"), ("int8", "uint8", "int32", "uint64", "int64"),
    [Case(((4, 9),), {"axis": 1}), Case(((4, 9),), {"axis": 1, "exclusive": True, "reverse": True})], doms=FULL)
for _kind, _op in (("min", "cumulative_minimum"), ("max", "cumulative_maximum")):
    row(_op, _op, _scan_ref(_kind), NUMERIC, _SCAN_CASES, doms=FULL, exact=True,
        grad=Grad(cases=(0, 2, 4, 7, 9), second_order=(0, 7), unknown_dims=(4, 7), doms=DISTINCT))
    # ties: equal running extremes (the value is the same whichever position holds it)
    row(_op + "_ties", _op, _scan_ref(_kind), NUMERIC, _SCAN_CASES[:10], doms=TIES, exact=True)
    row(_op + "_special", _op, _scan_ref(_kind), FLOATS, _SCAN_SPECIAL_CASES, exact=True, signbit=True)
# exclusive scans start with the infinite identity: the gradient rows clip it to stay finite
_EXCL = [Case(((6,),), {"exclusive": True}), Case(((6,),), {"exclusive": True, "reverse": True}),
         Case(((3, 5),), {"axis": -1, "exclusive": True, "reverse": True}),
         Case(((2, 3, 4),), {"axis": 1, "exclusive": True})]
row("cumulative_maximum_exclusive_clipped", lambda g, x, **a: g.maximum(g.cumulative_maximum(x, **a), -1e3),
    lambda x, **a: np.maximum(_scan_ref("max")(x, **a), -1e3), FLOATS, _EXCL, doms=DISTINCT, exact=True,
    covers=("cumulative_maximum",), grad=Grad(cases=(0, 1, 2, 3), second_order=(2,), unknown_dims=(3,)))
row("cumulative_minimum_exclusive_clipped", lambda g, x, **a: g.minimum(g.cumulative_minimum(x, **a), 1e3),
    lambda x, **a: np.minimum(_scan_ref("min")(x, **a), 1e3), FLOATS, _EXCL, doms=DISTINCT, exact=True,
    covers=("cumulative_minimum",), grad=Grad(cases=(0, 1, 2, 3), second_order=(2,), unknown_dims=(3,)))
row("cumulative_sum_special", "cumulative_sum", _scan_ref("sum"), FLOATS, _SCAN_SPECIAL_CASES, tol=_SCAN_TOL)
row("cumulative_product_special", "cumulative_product", _scan_ref("prod"), FLOATS, _SCAN_SPECIAL_CASES, tol=_SCAN_TOL)
