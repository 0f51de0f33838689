"""Conformance rows of the gather family: gather, gather_nd, gather_along_axis and the scatters
(onto zeros of a shape, and onto data) in every mode (imported by conformance.py; the rows join
conformance.ROWS).

References are independent of mpsgraph: np.take (looped over batch dims), np.take_along_axis,
an explicit tuple loop for gather_nd, and for every scatter an explicit loop over the updates in
row-major order applying the mode to Python numbers (integers wrapped to the dtype, division
truncating with x / 0 = 0 as the elementwise rule, NaN-propagating min / max). Index domains
include negative indices and draw from a few positions so that indices repeat.
"""
import math

import numpy as np

from conformance import ALL, FLOATS, NUMERIC, Case, D, Dom, Grad, dom, np_dtype, row


# float64 rows carry their indices as float64 (integral values, cast to int32 in the graph by
# _idx_op): the finite-difference harness feeds every input as float64
def _idx_dtypes(idt="int32"):
    return lambda d: (d, "float64" if d == "float64" else idt)


def _data_idx_dtypes(idt="int32"):
    return lambda d: (d, d, "float64" if d == "float64" else idt)


class _Ix(Dom):
    """Integer indices in [lo, hi] (negative ones included), in any dtype."""

    def __init__(self, lo, hi):
        super().__init__()
        self.lo_i, self.hi_i = lo, hi

    def draw(self, rng, shape, dtype):
        return np.asarray(rng.integers(self.lo_i, self.hi_i, size=shape, endpoint=True)).astype(np_dtype(dtype))


def _idx_op(name):
    """The op, with float indices cast to int32: the finite-difference harness feeds every input
    as float64 (the index values stay integral)."""
    def build(g, *ts, **attrs):
        *vals, idx = ts
        if idx.dtype.name.startswith("float"):
            idx = g.cast(idx, "int32")
        return getattr(g, name)(*vals, idx, **attrs)
    return build


def _norm(i, n):
    i = int(i)
    return i + n if i < 0 else i


# ---------------------------------------------------------------------------- gathers


def _take_batched(x, idx, axis, bd):
    if bd == 0:
        return np.take(x, idx, axis=axis)
    return np.stack([_take_batched(x[b], idx[b], axis - 1, bd - 1) for b in range(x.shape[0])])


def _gather_ref(x, idx, axis=0, batch_dims=0):
    axis = axis + x.ndim if axis < 0 else axis
    return _take_batched(x, idx.astype(np.int64), axis, batch_dims)


def _gather_nd_ref(x, idx, batch_dims=0):
    bd = batch_dims
    k = idx.shape[-1]
    out = np.zeros(idx.shape[:-1] + x.shape[bd + k:], dtype=x.dtype)
    for pos in np.ndindex(*idx.shape[:-1]):
        tup = tuple(_norm(v, x.shape[bd + j]) for j, v in enumerate(idx[pos]))
        out[pos] = x[pos[:bd] + tup]
    return out


def _along_ref(x, idx, axis):
    return np.take_along_axis(x, idx.astype(np.int64), axis=axis)


def _ix(lo, hi):  # data, indices drawn from [lo, hi]
    return (D, _Ix(lo, hi))


_GATHER_CASES = [
    Case(((5, 3), (4,)), {"axis": 0}, doms=_ix(-5, 4)),
    Case(((2, 5, 3), (2, 3)), {"axis": 1}, doms=_ix(-5, 4), label="2-d indices"),
    Case(((2, 4), ()), {"axis": -1}, doms=_ix(-4, 3), label="scalar index"),
    Case(((3, 4, 2), (3, 5)), {"axis": 1, "batch_dims": 1}, doms=_ix(-4, 3), label="batch_dims"),
    Case(((2, 3, 4, 2), (2, 3, 2)), {"axis": 2, "batch_dims": 2}, doms=_ix(-4, 3)),
    Case(((2, 3, 4), (2, 2)), {"axis": 2, "batch_dims": 1}, doms=_ix(-4, 3), label="batch, axis after"),
    Case(((4, 3), (0,)), {"axis": 0}, doms=_ix(0, 3), label="no indices"),
    Case(((0, 3), (2,)), {"axis": 1}, doms=_ix(0, 2), label="zero-size data"),
]
row("gather", _idx_op("gather"), _gather_ref, ALL, _GATHER_CASES, input_dtypes=_idx_dtypes(), covers=("gather",),
    exact=True,
    grad=Grad(wrt=(0,), cases=(0, "2-d indices", "batch_dims"), second_order=(0,), unknown_dims=True))
for _idt in ("int8", "int64", "uint8", "uint32", "uint64"):
    row(f"gather_indices_{_idt}", "gather", _gather_ref, ("float32",),
        [Case(((5, 3), (6,)), {"axis": 0}, doms=_ix(0 if _idt[0] == "u" else -5, 4)),
         Case(((3, 4, 2), (3, 5)), {"axis": 1, "batch_dims": 1}, doms=_ix(0 if _idt[0] == "u" else -4, 3))],
        input_dtypes=_idx_dtypes(_idt), exact=True)

_GATHER_ND_CASES = [
    Case(((4, 3), (5, 2)), {}, doms=_ix(-3, 2), label="full tuples"),
    Case(((4, 3, 2), (2, 3, 1)), {}, doms=_ix(-4, 3), label="slices"),
    Case(((2, 4, 3), (2, 5, 1)), {"batch_dims": 1}, doms=_ix(-3, 2), label="batch_dims"),
    Case(((3, 2), (0, 2)), {}, doms=_ix(0, 1), label="no indices"),
]
row("gather_nd", _idx_op("gather_nd"), _gather_nd_ref, ALL, _GATHER_ND_CASES, input_dtypes=_idx_dtypes(),
    covers=("gather_nd",), exact=True,
    none_variant=False,  # the tuple size must be known: tests/test_gather_scatter.py runs partial None dims
    grad=Grad(wrt=(0,), cases=("full tuples", "batch_dims"), second_order=("full tuples",)))
# K = 0: whole slices, from indices with no values (the Metal backend cannot lower a non-empty
# result from an empty input next to a computed one)
row("gather_nd_empty_tuples", "gather_nd", _gather_nd_ref, ("float32", "int32", "bool"),
    [Case(((3, 2), (4, 0)), {}, doms=_ix(0, 1))], input_dtypes=_idx_dtypes(), exact=True, none_variant=False,
    skip_devices={"metal": "a zero-size input next to a computed non-empty one is not lowered"})
row("gather_nd_int64", "gather_nd", _gather_nd_ref, ("float32", "int64"), _GATHER_ND_CASES[:3],
    input_dtypes=_idx_dtypes("int64"), exact=True, none_variant=False)

_ALONG_CASES = [
    Case(((4, 3), (6, 3)), {"axis": 0}, doms=_ix(-4, 3)),
    Case(((2, 5, 3), (2, 2, 3)), {"axis": 1}, doms=_ix(-5, 4), label="middle axis"),
    Case(((2, 3), (2, 4)), {"axis": -1}, doms=_ix(-3, 2)),
    Case(((2, 3), (2, 0)), {"axis": 1}, doms=_ix(0, 2), label="zero-size"),
]
row("gather_along_axis", _idx_op("gather_along_axis"), _along_ref, ALL, _ALONG_CASES, input_dtypes=_idx_dtypes(),
    covers=("gather_along_axis",),
    exact=True, grad=Grad(wrt=(0,), cases=(0, "middle axis"), second_order=(0,), unknown_dims=True))
row("gather_along_axis_int64", "gather_along_axis", _along_ref, ("float16", "int8"), _ALONG_CASES[:2],
    input_dtypes=_idx_dtypes("int64"), exact=True)


# ---------------------------------------------------------------------------- scatters


def _addresses(kind, res_shape, upd_shape, idx, axis=0, batch_dims=0):
    """(update coordinate, result coordinate) pairs in row-major order of the updates."""
    r = len(res_shape)
    if kind != "nd":
        axis = axis + r if axis < 0 else axis
    for uc in np.ndindex(*upd_shape):
        if kind == "axis":
            nq = idx.ndim - batch_dims
            i = idx[uc[:batch_dims] + uc[axis:axis + nq]]
            rc = uc[:axis] + (_norm(i, res_shape[axis]),) + uc[axis + nq:]
        elif kind == "along":
            rc = uc[:axis] + (_norm(idx[uc], res_shape[axis]),) + uc[axis + 1:]
        else:
            bd = batch_dims
            q = idx.ndim - 1
            tup = idx[uc[:q]]
            rc = uc[:bd] + tuple(_norm(v, res_shape[bd + j]) for j, v in enumerate(tup)) + uc[q:]
        yield uc, rc


def _combine(mode, x, y, dt):
    if mode == "set":
        return y
    if dt.kind in "iu":
        x, y = int(x), int(y)
        if mode == "add":
            v = x + y
        elif mode == "sub":
            v = x - y
        elif mode == "mul":
            v = x * y
        elif mode == "div":
            v = 0 if y == 0 else (abs(x) // abs(y)) * (1 if (x < 0) == (y < 0) else -1)
        elif mode == "min":
            v = min(x, y)
        else:
            v = max(x, y)
        bits = dt.itemsize * 8
        v &= (1 << bits) - 1
        if dt.kind == "i" and v >= 1 << (bits - 1):
            v -= 1 << bits
        return v
    x, y = float(x), float(y)
    if mode in ("min", "max") and (math.isnan(x) or math.isnan(y)):
        return math.nan
    with np.errstate(all="ignore"):
        return {"add": x + y, "sub": x - y, "mul": x * y, "div": np.float64(x) / np.float64(y),
                "min": min(x, y), "max": max(x, y)}[mode]


def _scatter_loop(kind, data, upd, idx, mode, **addr):
    dt = upd.dtype
    res = data.astype(np.float64 if dt.kind == "f" else object).copy()
    for uc, rc in _addresses(kind, data.shape, upd.shape, idx, **addr):
        res[rc] = _combine(mode, res[rc], upd[uc], dt)
    if dt.kind in "iu":
        return res.astype(dt)
    return res if dt.kind == "f" else res.astype(bool)


def _scatter_ref(kind):
    def ref(upd, idx, shape, mode="add", **addr):
        return _scatter_loop(kind, np.zeros(shape, dtype=upd.dtype), upd, idx, mode, **addr)
    return ref


def _scatter_data_ref(kind):
    def ref(data, upd, idx, mode="add", **addr):
        return _scatter_loop(kind, data, upd, idx, mode, **addr)
    return ref


_MODES = ("add", "sub", "mul", "div", "min", "max", "set")
# per-step rounding in float16/bfloat16 (MPSGraph updates in the dtype too) vs one rounding of the reference
_HALF_TOL = {"float16": (4e-3, 4e-3), "bfloat16": (3e-2, 3e-2)}
_UPD = dom(lo=-2.0, hi=2.0, ilo=-3, ihi=3, nonzero=True)  # nonzero: 'div'


def _dtypes_for(mode):
    return ALL if mode == "set" else NUMERIC


# (kind, data shape, updates shape, indices shape, addressing attrs, index lo, hi, label)
_SCATTER_GEOMS = [
    ("axis", (4, 3), (6, 3), (6,), {"axis": 0}, -4, 3, "repeats"),
    ("axis", (2, 3, 2), (2, 5, 2), (5,), {"axis": 1}, -3, 2, "middle axis"),
    ("axis", (2, 3), (2, 2, 2), (2, 2), {"axis": -1}, -3, 2, "2-d indices"),
    ("axis", (3, 4, 2), (3, 5, 2), (3, 5), {"axis": 1, "batch_dims": 1}, -4, 3, "batch_dims"),
    ("axis", (3, 2), (0, 2), (0,), {"axis": 0}, 0, 2, "no updates"),
    ("nd", (4, 3), (6,), (6, 2), {}, -3, 2, "nd tuples"),
    ("nd", (4, 3, 2), (5, 3, 2), (5, 1), {}, -4, 3, "nd slices"),
    ("nd", (2, 4, 3), (2, 5, 3), (2, 5, 1), {"batch_dims": 1}, -4, 3, "nd batch_dims"),
    ("along", (4, 3), (6, 3), (6, 3), {"axis": 0}, -4, 3, "along"),
    ("along", (2, 3, 2), (2, 4, 2), (2, 4, 2), {"axis": 1}, -3, 2, "along middle"),
    ("along", (2, 0), (2, 0), (2, 0), {"axis": 1}, 0, 0, "along zero-size"),
]
_OPS = {"axis": "scatter", "nd": "scatter_nd", "along": "scatter_along_axis"}
_SET_ON_METAL = ("MPSGraph does not say which update 'set' keeps for repeated indices (docs/metal.md); the "
                 "scatter_set_unique rows run there")


def _geoms(kind):
    return [gm for gm in _SCATTER_GEOMS if gm[0] == kind]


for _kind in ("axis", "nd", "along"):
    _op = _OPS[_kind]
    for _mode in _MODES:
        cases = [Case((u, i), {"shape": d, "mode": _mode, **a}, doms=(_UPD, _Ix(lo, hi)), label=lb)
                 for _, d, u, i, a, lo, hi, lb in _geoms(_kind)]
        dcases = [Case((d, u, i), {"mode": _mode, **a}, doms=(D, _UPD, _Ix(lo, hi)), label=lb)
                  for _, d, u, i, a, lo, hi, lb in _geoms(_kind) if lb != "no updates"]  # see gather_nd_empty_tuples
        tol = {} if _mode in ("set", "min", "max") else _HALF_TOL
        skip = {"metal": _SET_ON_METAL} if _mode == "set" else {}
        row(f"{_op}_{_mode}", _idx_op(_op), _scatter_ref(_kind), _dtypes_for(_mode), cases, input_dtypes=_idx_dtypes(),
            covers=(_op,),
            tol=tol, none_variant=_kind != "nd", skip_devices=skip,
            grad=Grad(wrt=(0,), cases=(0,)) if _mode in ("set", "add", "sub") else None)
        row(f"{_op}_with_data_{_mode}", _idx_op(_op + "_with_data"), _scatter_data_ref(_kind), _dtypes_for(_mode),
            dcases, input_dtypes=_data_idx_dtypes(), covers=(_op + "_with_data",), tol=tol, none_variant=_kind != "nd",
            skip_devices=skip)

def _vals(shape, k=0):
    """Deterministic values of any dtype (bool: parity)."""
    def make(dt):
        v = (np.arange(int(np.prod(shape))) * 5 + k) % 7 - 3
        return (v % 2 == 1 if dt == "bool" else v).reshape(shape)
    return make


# 'set' without repeated indices (negative ones included): the same on every device
_SET_UNIQUE = [
    ("scatter_with_data", ((4, 3), (3, 3)), [3, -4, 1], {"axis": 0}),
    ("scatter_with_data", ((2, 4), (2, 2)), [-1, 1], {"axis": 1}),
    ("scatter_nd_with_data", ((4, 3), (3,)), [[0, -1], [3, 0], [-4, 2]], {}),
    ("scatter_along_axis_with_data", ((3, 4), (2, 4)), [[0, -1, 2, 1], [-3, 0, -2, 2]], {"axis": 0}),
]
for _op, (_ds, _us), _iv, _a in _SET_UNIQUE:
    _kind = {"scatter_with_data": "axis", "scatter_nd_with_data": "nd", "scatter_along_axis_with_data": "along"}[_op]
    row(f"scatter_set_unique_{_op}_{len(_ds)}_{_a.get('axis', 'nd')}", _op, _scatter_data_ref(_kind), ALL,
        [Case(values=(_vals(_ds), _vals(_us, 3), _iv), attrs={"mode": "set", **_a})],
        input_dtypes=lambda d: (d, d, "int32"), exact=True, none_variant=_kind != "nd")
row("scatter_set_unique_shape_form", "scatter", _scatter_ref("axis"), ALL,
    [Case(values=(_vals((3, 3), 1), [3, -4, 1]), attrs={"shape": (4, 3), "mode": "set"})],
    input_dtypes=lambda d: (d, "int32"), exact=True)

row("scatter_int64_indices", "scatter_with_data", _scatter_data_ref("axis"), ("float32", "int32"),
    [Case(((4, 3), (6, 3), (6,)), {"axis": 0, "mode": "add"}, doms=(D, _UPD, _Ix(-4, 3)))],
    input_dtypes=_data_idx_dtypes("int64"))
row("scatter_uint8_indices", "scatter_along_axis_with_data", _scatter_data_ref("along"), ("float32",),
    [Case(((4, 3), (6, 3), (6, 3)), {"axis": 0, "mode": "max"}, doms=(D, _UPD, _Ix(0, 3)))],
    input_dtypes=_data_idx_dtypes("uint8"))
# NaN propagates through min / max as np.maximum.at does
row("scatter_max_nan", "scatter_with_data", _scatter_data_ref("axis"), ("float32", "float16"),
    [Case(values=([1.0, 2.0, np.nan], [np.nan, 5.0, -1.0, 0.5], [0, 0, 1, 2]), attrs={"mode": "max"}),
     Case(values=([1.0, 2.0, 3.0], [np.nan, 5.0, -1.0, 0.5], [1, 0, 1, 2]), attrs={"mode": "min"})],
    input_dtypes=_data_idx_dtypes())


# ---------------------------------------------------------------------------- gradients


class _Distinct(Dom):
    """Float values without ties (min / max kinks); integers for the indices."""

    def __init__(self, offset=0.0, **kw):
        super().__init__(**kw)
        self.offset = offset

    def draw(self, rng, shape, dtype):
        if dtype in FLOATS:
            n = int(np.prod(shape))
            return (rng.permutation(n).reshape(shape) * 0.37 - n * 0.15 + self.offset).astype(dtype)
        return super().draw(rng, shape, dtype)


def _grad_geoms():
    return [(_OPS[k], d, u, i, a, lo, hi, lb) for k, d, u, i, a, lo, hi, lb in _SCATTER_GEOMS
            if lb in ("repeats", "batch_dims", "nd tuples", "nd batch_dims", "along middle")]


_AWAY = dom(lo=0.5, hi=1.5)  # 'mul' / 'div': no division near zero in the finite differences

for _mode in ("set", "add", "sub", "min", "max", "mul", "div"):
    for _op, d, u, i, a, lo, hi, lb in _grad_geoms():
        ref = _scatter_data_ref({"scatter": "axis", "scatter_nd": "nd", "scatter_along_axis": "along"}[_op])
        doms = (_Distinct(), _Distinct(offset=0.11), _Ix(lo, hi)) if _mode not in ("mul", "div") else \
            (D, _AWAY, _Ix(lo, hi))
        row(f"grad_{_op}_with_data_{_mode}_{lb.replace(' ', '_')}", _idx_op(_op + "_with_data"), ref,
            ("float64",),
            [Case((d, u, i), {"mode": _mode, **a}, doms=doms, label=lb)], input_dtypes=_data_idx_dtypes(),
            covers=(_op + "_with_data",),
            none_variant=False,
            grad=Grad(wrt=(0, 1), cases=(0,), second_order=_mode in ("add", "sub", "set", "mul", "div"),
                      unknown_dims=_mode != "set" and _op != "scatter_nd"))
    row(f"grad_scatter_{_mode}_shape_form", _idx_op("scatter"), _scatter_ref("axis"), ("float64",),
        [Case(((6, 3), (6,)), {"shape": (4, 3), "mode": _mode}, doms=(_Distinct(offset=0.05), _Ix(-4, 3)))],
        input_dtypes=_idx_dtypes(), covers=("scatter",), none_variant=False, grad=Grad(wrt=(0,), cases=(0,)))
# 'mul' with zero updates: one zero at a position (its gradient is the product of the others),
# two zeros (all 0), none. First order only: at an exact zero the zero-safe rule's second
# derivative misses the other updates' terms (as reduction_product's)
row("grad_scatter_with_data_mul_zero_updates", _idx_op("scatter_with_data"), _scatter_data_ref("axis"), ("float64",),
    [Case(values=([1.5, -2.0, 0.5, 3.0], [0.0, 2.0, -1.5, 0.0, 1.25, 0.7, 0.0, 0.0], [0, 0, 1, 1, 1, 2, 3, 3]),
          attrs={"mode": "mul"})],
    input_dtypes=_data_idx_dtypes(), covers=("scatter_with_data",), none_variant=False,
    grad=Grad(wrt=(0, 1), cases=(0,)))
