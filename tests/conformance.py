"""The op conformance table: ONE table drives the op tests on every available device.

A row names an op (a Graph method, or a callable building with operators/sugar), how to
make its inputs (shapes incl. broadcasting pairs, rank-0 and zero-size dims; a value domain
per input; dtypes), its attributes, an independent numpy reference and tolerances per
dtype, and optional special-value cases (nan, inf, -0.0, integer edge values).

Adding an op is adding one row. tests/test_conformance.py runs every row x dtype x device,
with static placeholder shapes and again with every placeholder dim None.

References never use mpsgraph: numpy (computed in float64 on the exact values of the
rounded inputs, then rounded once to the output dtype: float16/bfloat16 by round_to_half),
Python integers for the documented integer rules (wrapping, division by zero, shifts >= the
bit width), scipy/math for erf, and PyTorch (TorchRef: torch.nn.functional, torch.optim) for
the NN families.

A row is OpInfo-like. Besides the op, its samples (`cases`: shapes drawn from value domains, or
explicit values, each with attributes and optionally its own domains or dtypes) and the
reference, it may carry:
  * `tol`: (rtol, atol) per dtype; `exact` for correctly rounded ops;
  * `out_dtype`: one dtype, or a tuple with one per output (e.g. pooling values and indices);
  * `grad` (Grad): gradient support. Finite differences (tests/gradcheck.py, float64 on the CPU)
    of the listed cases, optionally to second order and with unknown dims; and, where the
    reference is a TorchRef, the vector-Jacobian product against torch.autograd on every case
    in float32/float64 on every device, in the same run as the values;
  * `stat_check`: for random ops, distribution checks (support, moments, Kolmogorov-Smirnov
    bounds) of fixed-seed draws instead of a value reference;
  * `skip_devices`: device kinds the row does not run on, with the reason;
  * `known_bugs`: dtypes for which the row shows a reported library bug (strict xfail).
"""
import math
import warnings
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import ml_dtypes
import numpy as np

import mpsgraph as mg

try:  # erf reference
    from scipy.special import erf as _erf
except ImportError:  # pragma: no cover
    _erf = np.vectorize(math.erf, otypes=[np.float64])

# ----------------------------------------------------------------------------------------
# dtypes

BF16 = np.dtype(ml_dtypes.bfloat16)
FLOATS = ("float16", "bfloat16", "float32", "float64")
SINTS = ("int8", "int16", "int32", "int64")
UINTS = ("uint8", "uint16", "uint32", "uint64")
INTS = SINTS + UINTS
NUMERIC = FLOATS + INTS
ALL = NUMERIC + ("bool",)
HALF = ("float16", "bfloat16")


def np_dtype(name):
    return BF16 if name == "bfloat16" else np.dtype(name)


def is_float(name):
    return name in FLOATS


# (significand bits incl. the implicit one, minimum normal exponent, maximum exponent)
_HALF_FORMATS = {"float16": (11, -14, 15), "bfloat16": (8, -126, 127)}


def round_to_half(x, dtype):
    """float64 (or anything exactly representable in float64) -> float16/bfloat16, correctly
    rounded (round to nearest, ties to even) straight from the float64 value: no library cast
    decides the rounding. Each value is rounded on its own quantum (2**(exponent - p + 1), the
    subnormal quantum below the normal range) with np.rint, which is exact here because scaling
    by a power of two is exact; the rounded value is then representable in the target, so the
    final astype is exact whatever the library does. Overflow (including the tie at
    max + half an ulp, which rounds to the even 2**(emax+1)) gives inf; NaN stays NaN, -0.0 stays
    -0.0."""
    p, emin, emax = _HALF_FORMATS[dtype]
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        _, e = np.frexp(x)  # |x| = m * 2**e with m in [0.5, 1): the unit in the first place is 2**(e-1)
        q = np.ldexp(1.0, np.maximum(e - 1, emin) - (p - 1))
        finite = np.isfinite(x)
        r = np.where(finite, np.rint(np.where(finite, x, 0.0) / q) * q, x)
        big = np.abs(r) >= 2.0 ** (emax + 1)
        r = np.where(big, np.copysign(np.inf, x), r)
    return r.astype(np_dtype(dtype))


def is_int(name):
    return name in INTS


# default (rtol, atol) per output dtype: the output is compared with the float64 reference
# rounded to the output dtype, so these allow ~1-2 ulp (more for float32 libm functions).
TOL = {
    "float16": (2e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-4),
    "float32": (1e-5, 1e-6),
    "float64": (1e-12, 1e-14),
}


# ----------------------------------------------------------------------------------------
# value domains


@dataclass
class Dom:
    """How to draw one input: floats uniform in [lo, hi]; integers in [ilo, ihi] (clipped to
    the dtype) or the dtype's full range; bools at random. `integral` rounds floats to
    integers; `nonzero` keeps |x| away from 0 (floats) or != 0 (ints)."""
    lo: float = -3.0
    hi: float = 3.0
    ilo: int = -20
    ihi: int = 20
    full_int: bool = False
    integral: bool = False
    nonzero: bool = False

    def draw(self, rng, shape, dtype):
        dt = np_dtype(dtype)
        if dtype == "bool":
            return rng.random(shape) < 0.5
        if is_int(dtype):
            info = np.iinfo(dt)
            if self.full_int:
                a = rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
            else:
                lo, hi = max(self.ilo, int(info.min)), min(self.ihi, int(info.max))
                a = rng.integers(lo, hi, size=shape, endpoint=True).astype(dt)
            if self.nonzero:
                a = np.where(a == 0, dt.type(1), a).astype(dt)
            return a
        a = rng.uniform(self.lo, self.hi, size=shape)
        if self.integral:
            a = np.round(a)
        if self.nonzero:
            a = np.where(np.abs(a) < 0.05, 0.5, a)
        return np.asarray(a).astype(dt)


D = Dom()  # default domain


def dom(**kw):
    return Dom(**kw)


# ----------------------------------------------------------------------------------------
# rows and cases


@dataclass
class Case:
    """One sample: shapes (one per input) or explicit values, plus attributes.
    values: per input, a sequence (cast to the input dtype) or a callable dtype -> array.
    doms: this case's value domains (a Dom, or one per input) instead of the row's."""
    shapes: tuple = ()
    attrs: dict = field(default_factory=dict)
    values: Optional[tuple] = None
    dtypes: Optional[tuple] = None  # restrict this case to these dtypes
    label: str = ""
    doms: Any = None


@dataclass
class Grad:
    """A row's gradient support, checked two ways from the row's own samples:

    * finite differences (tests/gradcheck.py; float64 on the CPU; independent of any library) of
      the cases listed in `cases` (indices into the row's float64 cases), to second order with
      `second_order`, and again with every placeholder dim None with `unknown_dims`;
    * where the reference is a TorchRef and `vjp` is set: mpsgraph's gradient of
      sum(dy * output) against torch.autograd on every case, float32 and float64, on every
      device, in the same run as the values.

    wrt: the inputs to differentiate (default: every floating-point input; inputs that only give
    a shape, like `like`, are left out). doms: value domains for the finite differences (e.g.
    values without ties for max pooling), default the case's or the row's."""
    wrt: Optional[tuple] = None
    cases: tuple = (0,)              # entries: an index into the float64 cases, or a case label
    second_order: Any = False        # True (every entry in `cases`) or a tuple of entries
    unknown_dims: Any = False        # True or a tuple of entries: also with every placeholder dim None
    doms: Any = None
    rtol: float = 1e-5
    atol: float = 1e-6
    vjp: bool = True
    vjp_tol: dict = field(default_factory=dict)  # dtype -> (rtol, atol); default: the row's tolerance


@dataclass
class Row:
    name: str                       # test id
    op: Any                         # Graph method name, or build(g, *tensors, **attrs)
    ref: Callable                   # reference: ref(*arrays, **attrs), numpy or a TorchRef
    dtypes: tuple
    cases: list                     # the samples (Case)
    doms: Any = None                # Dom or tuple of Dom, one per input
    out_dtype: Any = None           # None: the input dtype; a name; a tuple (one per output); or callable(dtype)
    input_dtypes: Any = None        # callable(dtype) -> per-input dtype names (default all = dtype)
    tol: dict = field(default_factory=dict)  # dtype -> (rtol, atol) overrides
    ref_precision: str = "f64"      # "f64": float inputs as float64; "same": in their own dtype (halves as float32)
    pack: Optional[Callable] = None  # tensors -> positional args (e.g. a list for concat)
    signbit: bool = False           # also compare the sign of zero results
    dtype_attr: Optional[str] = None  # creation ops: the attr receiving the dtype
    static_shape: bool = True       # check the output's static shape where inputs are static
    none_variant: bool = True       # also run with None dims in the placeholders
    exact: bool = False             # correctly rounded op: float results must equal the rounded reference
    grad: Optional[Grad] = None     # gradient support (finite differences; vjp against a TorchRef)
    # random ops: stat_check(outputs, inputs, attrs, dtype) asserts distribution properties (moments,
    # Kolmogorov-Smirnov bounds, support) of fixed-seed draws instead of comparing with `ref`; the
    # harness also checks that a seed reproduces its draws and that a second run draws fresh ones
    stat_check: Optional[Callable] = None
    skip_devices: dict = field(default_factory=dict)  # device kind ("metal", "cuda") -> why this row skips it
    covers: tuple = ()              # op names a row with a callable `op` tests (for the coverage checks)
    # dtype -> a known library bug this row shows (pytest xfail, strict: the test fails once the bug
    # is fixed, so that the mark goes). Keep such rows minimal: the bug's cases only.
    known_bugs: dict = field(default_factory=dict)

    @property
    def nin(self):
        for c in self.cases:
            if c.values is not None:
                return len(c.values)
            return len(c.shapes)
        return 0

    def dom_for(self, i, case=None):
        doms = case.doms if case is not None and case.doms is not None else self.doms
        if doms is None:
            return D
        if isinstance(doms, Dom):
            return doms
        return doms[i]

    def in_dtypes(self, dtype, n=None):
        n = self.nin if n is None else n
        if self.input_dtypes is None:
            return (dtype,) * n
        return tuple(self.input_dtypes(dtype))

    def out_dtype_for(self, dtype):
        if self.out_dtype is None:
            return dtype
        if callable(self.out_dtype):
            return self.out_dtype(dtype)
        return self.out_dtype

    def out_dtypes_for(self, dtype, n):
        """One output dtype per output."""
        o = self.out_dtype_for(dtype)
        return tuple(o) if isinstance(o, (tuple, list)) else (o,) * n


def seed_for(*parts):
    return zlib.crc32("|".join(map(str, parts)).encode())


# ----------------------------------------------------------------------------------------
# PyTorch references


def torch_module():
    """PyTorch (in the test extra). Imported on first use, so that the table stays importable."""
    import torch
    return torch


class TorchRef:
    """A reference written with PyTorch: fn(*tensors, **attrs) -> tensor or tuple, on float64
    tensors (the exact values of the rounded inputs). Called with numpy arrays like any other
    reference; with a Grad spec on its row, torch.autograd gives the vector-Jacobian products."""

    def __init__(self, fn):
        self.fn = fn

    @staticmethod
    def _tensors(arrays, wrt=()):
        torch = torch_module()
        return [torch.tensor(np.array(a, copy=True, order="C"), requires_grad=i in wrt) if isinstance(a, np.ndarray)
                else a for i, a in enumerate(arrays)]

    def __call__(self, *arrays, **attrs):
        outs = self.fn(*self._tensors(arrays), **attrs)
        return tuple(o.detach().numpy() for o in _as_tuple(outs))

    def value_and_vjp(self, arrays, attrs, wrt):
        """The outputs (numpy) and a function dys -> the gradients of sum_k(dys[k] * output_k)
        with respect to arrays[i] for i in wrt (one forward pass for both)."""
        torch = torch_module()
        ts = self._tensors(arrays, wrt)
        outs = _as_tuple(self.fn(*ts, **attrs))

        def vjp(dys):
            loss = sum((outs[k] * torch.from_numpy(dy)).sum() for k, dy in dys.items())
            if not getattr(loss, "requires_grad", False):
                return [np.zeros_like(arrays[i]) for i in wrt]
            gs = torch.autograd.grad(loss, [ts[i] for i in wrt], allow_unused=True)
            return [np.zeros_like(arrays[i]) if gi is None else gi.detach().numpy() for i, gi in zip(wrt, gs)]

        return tuple(o.detach().numpy() for o in outs), vjp


# ----------------------------------------------------------------------------------------
# building, running, comparing


def make_value(v, dtype):
    dt = np_dtype(dtype)
    if callable(v):
        a = np.asarray(v(dtype))
        return a.astype(dt) if a.dtype != dt else a
    with np.errstate(all="ignore"):
        return np.asarray(np.asarray(v, dtype=np.float64 if is_float(dtype) else None)).astype(dt)


def ref_input(a, precision):
    """The array the numpy reference sees."""
    if a.dtype == BF16 or a.dtype == np.float16:
        return a.astype(np.float64) if precision == "f64" else a.astype(np.float32)
    if a.dtype.kind == "f" and precision == "f64":
        return a.astype(np.float64)
    return a


def to_numpy(td):
    """A copy of a TensorData's values as numpy (bfloat16 via ml_dtypes)."""
    return np.array(td.numpy(), copy=True)


def _as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _round_ref(r, out_dtype):
    dt = np_dtype(out_dtype)
    r = np.asarray(r)
    with np.errstate(all="ignore"):
        if out_dtype == "bool":
            return r.astype(bool)
        if is_int(out_dtype) and r.dtype.kind in "iub" and r.dtype != dt:
            # integer results must already be in range; a silent wrap would hide a bad reference
            assert r.size == 0 or (int(r.min()) >= np.iinfo(dt).min and int(r.max()) <= np.iinfo(dt).max), \
                "reference integer result out of range"
        if out_dtype in HALF and r.dtype != dt and r.dtype.kind in "fiu":
            # one correct rounding from the float64 value (ml_dtypes 0.6 rounds float64 -> bfloat16
            # through float32, twice)
            if r.dtype.kind in "iu":
                assert r.size == 0 or np.abs(r.astype(np.float64)).max() < 2.0 ** 53, "integer reference not exact"
            return round_to_half(r, out_dtype)
        return r.astype(dt)


def compare(got, want, out_dtype, tol, signbit=False, what=""):
    """Assert got (numpy, from the library) matches want (reference already rounded to out_dtype)."""
    assert got.shape == want.shape, f"{what}: shape {got.shape} != expected {want.shape}"
    assert got.dtype == np_dtype(out_dtype), f"{what}: dtype {got.dtype} != expected {out_dtype}"
    if is_float(out_dtype):
        rtol, atol = tol
        g64, w64 = got.astype(np.float64), want.astype(np.float64)
        np.testing.assert_allclose(g64, w64, rtol=rtol, atol=atol, equal_nan=True, err_msg=what)
        if signbit:
            zeros = (w64 == 0) & (g64 == 0)
            np.testing.assert_array_equal(np.signbit(g64[zeros]), np.signbit(w64[zeros]),
                                          err_msg=f"{what}: sign of zero")
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def build(g, row, tensors, attrs):
    args = row.pack(tensors) if row.pack else tuple(tensors)
    if callable(row.op):
        return row.op(g, *args, **attrs)
    return getattr(g, row.op)(*args, **attrs)


def reference(row, arrays, attrs):
    ins = [ref_input(a, row.ref_precision) for a in arrays]
    args = row.pack(ins) if row.pack else tuple(ins)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return _as_tuple(row.ref(*args, **attrs))


# The static and the None-dims variants of a row draw the same inputs: their references
# (PyTorch's in particular) are computed once. Holds one (row, dtype) at a time.
_REF_CACHE = {"key": None, "cases": {}}


def _cached_reference(row, dtype, ci, arrays, attrs, vjp_wrt):
    """(reference outputs, vjp function or None, slot for the vjp's result) of case ci."""
    if _REF_CACHE["key"] != (row.name, dtype):
        _REF_CACHE["key"], _REF_CACHE["cases"] = (row.name, dtype), {}
    entry = _REF_CACHE["cases"].get(ci)
    if entry is None:
        if vjp_wrt is not None:
            with np.errstate(all="ignore"):
                ref, fn = row.ref.value_and_vjp([ref_input(a, "f64") for a in arrays], attrs, vjp_wrt)
        else:
            ref, fn = reference(row, arrays, attrs), None
        entry = _REF_CACHE["cases"][ci] = [ref, fn, None]
    return entry


def cases_for(row, dtype):
    return [c for c in row.cases if c.dtypes is None or dtype in c.dtypes]


def case_inputs(row, case, dtype, rng):
    """The input arrays of one case for dtype (explicit values, or drawn from the domains), and
    their dtype names."""
    n = len(case.values) if case.values is not None else len(case.shapes)
    in_dts = row.in_dtypes(dtype, n)
    if case.values is not None:
        arrays = [make_value(v, in_dts[i]) for i, v in enumerate(case.values)]
    else:
        arrays = [row.dom_for(i, case).draw(rng, s, in_dts[i]) for i, s in enumerate(case.shapes)]
    return arrays, in_dts


def case_attrs(row, case, dtype):
    attrs = dict(case.attrs)
    if row.dtype_attr:
        attrs[row.dtype_attr] = dtype
    return attrs


def _case_label(ci, case, arrays):
    label = f"case {ci} {case.label or ''} shapes={case.shapes} attrs={case.attrs}".replace("  ", " ")
    if case.values is not None:
        label += " values=" + ", ".join(np.array2string(a.astype(np.float64) if a.dtype == BF16 else a,
                                                        threshold=20) for a in arrays)
    return label


def _float_wrt(row, arrays):
    if row.grad.wrt is not None:
        return list(row.grad.wrt)
    return [i for i, a in enumerate(arrays) if a.dtype.kind == "f" or a.dtype == BF16]


def _default_tol(row, dtype, out_dt, exact):
    return row.tol.get(dtype, (0.0, 0.0) if exact else TOL.get(out_dt, (0, 0)))


def check_row(row, dtype, device, none_dims=False):
    """Builds one graph holding every case of the row for this dtype, runs it once on device
    and compares every output with the reference (and, for rows with a Grad spec and a
    TorchRef, every gradient with torch.autograd). Collects all failures, then fails."""
    if row.stat_check is not None:
        return check_stat_row(row, dtype, device, none_dims)
    rng = np.random.default_rng(seed_for(row.name, dtype))
    # exactness is the CPU backend's IEEE guarantee; GPU math libraries may be an ulp or two off
    exact = row.exact and str(device).startswith("cpu")
    vjp = (row.grad is not None and row.grad.vjp and isinstance(row.ref, TorchRef)
           and dtype in ("float32", "float64"))
    g = mg.Graph()
    feeds, pending, failures = {}, [], []
    for ci, case in enumerate(cases_for(row, dtype)):
        arrays, in_dts = case_inputs(row, case, dtype, rng)
        label = _case_label(ci, case, arrays)
        attrs = case_attrs(row, case, dtype)
        try:
            entry = _cached_reference(row, dtype, ci, arrays, attrs, _float_wrt(row, arrays) if vjp else None)
        except Exception as e:  # a bad table entry, not a library bug
            raise AssertionError(f"{row.name}/{dtype} {label}: the reference failed: {e!r}") from e
        ref = entry[0]
        out_dts = row.out_dtypes_for(dtype, len(ref))
        try:
            ts = []
            for a, idt in zip(arrays, in_dts):
                shape = (None,) * a.ndim if none_dims else a.shape
                p = g.placeholder(shape, idt)
                feeds[p] = a
                ts.append(p)
            outs = _as_tuple(build(g, row, ts, attrs))
        except Exception as e:
            failures.append(f"{label}: building raised {type(e).__name__}: {e}")
            continue
        if len(outs) != len(ref):
            failures.append(f"{label}: {len(outs)} outputs, reference has {len(ref)}")
            continue
        for k, (t, r) in enumerate(zip(outs, ref)):
            out_dt = out_dts[k]
            want = _round_ref(r, out_dt)
            # static type: dtype always, shape where every input shape is static
            if t.dtype != mg.as_dtype(out_dt):
                failures.append(f"{label} output {k}: static dtype {t.dtype.name} != {out_dt}")
            if row.static_shape:
                ok = len(t.shape) == want.ndim and all(
                    d is None or d == w for d, w in zip(t.shape, want.shape))
                if not none_dims:
                    ok = ok and tuple(t.shape) == want.shape
                if not ok:
                    failures.append(f"{label} output {k}: static shape {t.shape} vs expected {want.shape}")
            pending.append((f"{label} output {k}", t, want, out_dt, _default_tol(row, dtype, out_dt, exact)))
        if vjp:
            try:
                pending += _vjp_pending(row, g, ts, outs, entry, arrays, dtype, rng, label)
            except Exception as e:
                failures.append(f"{label}: gradients raised {type(e).__name__}: {e}")
    if pending:
        try:
            res = g.run(feeds, [p[1] for p in pending], device=device)
        except Exception as e:
            if isinstance(e, mg.GraphNotImplementedError) and not str(device).startswith("cpu"):
                raise  # a backend without this kernel yet: test_conformance counts it, not a wrong result
            failures.append(f"run raised {type(e).__name__}: {e}")
            res = None
        if res is not None:
            for what, t, want, out_dt, tol in pending:
                try:
                    compare(to_numpy(res[t]), want, out_dt, tol, row.signbit and "d/d" not in what, what)
                except AssertionError as e:
                    failures.append(str(e).strip())
    if failures:
        raise AssertionError(f"{row.name} [{dtype}, {device}{', None dims' if none_dims else ''}]: "
                             f"{len(failures)} failing case(s):\n" + "\n".join(failures))


def _vjp_pending(row, g, ts, outs, entry, arrays, dtype, rng, label):
    """mpsgraph's gradients of sum(dy * output) for one case, with torch.autograd's as the wants."""
    ref, vjp_fn, _ = entry
    wrt = _float_wrt(row, arrays)
    fl = [k for k, t in enumerate(outs) if t.dtype.name in FLOATS]
    if not wrt or not fl:
        return []
    dys = {k: rng.standard_normal(np.shape(ref[k])).astype(np_dtype(dtype)) for k in fl}
    loss = None
    for k in fl:
        term = g.reduction_sum(outs[k] * g.constant(dys[k]), keep_dims=False)
        loss = term if loss is None else loss + term
    grads = g.gradients(loss, [ts[i] for i in wrt])
    if entry[2] is None:  # the same dys in both variants (the same draws from the same seed)
        entry[2] = vjp_fn({k: dy.astype(np.float64) for k, dy in dys.items()})
    tol = row.grad.vjp_tol.get(dtype, _default_tol(row, dtype, dtype, False))
    return [(f"{label} d/d input {i}", grads[ts[i]], _round_ref(w, dtype), dtype, tol)
            for i, w in zip(wrt, entry[2])]


def grad_entries(row):
    """(entry, with unknown dims) pairs of a row's finite-difference checks."""
    spec = row.grad
    out = []
    for e in spec.cases:
        out.append((e, False))
        if spec.unknown_dims is True or (isinstance(spec.unknown_dims, tuple) and e in spec.unknown_dims):
            out.append((e, True))
    return out


def _grad_case(row, entry):
    cases = cases_for(row, "float64")
    if isinstance(entry, int):
        return entry, cases[entry]
    hits = [i for i, c in enumerate(cases) if c.label == entry]
    assert len(hits) == 1, f"{row.name}: Grad case label {entry!r} names {len(hits)} cases"
    return hits[0], cases[hits[0]]


def check_row_gradient(row, entry, unknown_dims=False):
    """Finite differences (tests/gradcheck.py, float64, CPU) of one case of a row with a Grad
    spec: the gradient of sum(w * outputs) for a fixed random w (several float outputs are
    flattened and concatenated), to second order where the spec says so (static dims only)."""
    from gradcheck import check_op_gradient
    spec = row.grad
    index, case = _grad_case(row, entry)
    rng = np.random.default_rng(seed_for(row.name, "grad", index))
    if spec.doms is not None:
        case = Case(case.shapes, case.attrs, case.values, case.dtypes, case.label, spec.doms)
    arrays, _ = case_inputs(row, case, "float64", rng)
    attrs = case_attrs(row, case, "float64")
    wrt = _float_wrt(row, arrays)
    second = spec.second_order is True or (isinstance(spec.second_order, tuple) and entry in spec.second_order)

    def build_fn(g, *ts):
        outs = [o for o in _as_tuple(build(g, row, list(ts), attrs)) if o.dtype.name in FLOATS]
        if len(outs) == 1:
            return outs[0]
        return g.concat([g.reshape(o, (-1,)) for o in outs], axis=0)

    check_op_gradient(build_fn, [a.copy() for a in arrays], wrt=wrt, unknown_dims=unknown_dims, rtol=spec.rtol,
                      atol=spec.atol, second_order=second and not unknown_dims, seed=seed_for(row.name, index))


def check_stat_row(row, dtype, device, none_dims=False):
    """Random ops: every case's draws (fixed seeds) must pass row.stat_check; the same graph built
    again must reproduce them (a seed fixes the sequence of runs), and a second run of the same
    graph must draw fresh numbers."""

    def build_all():
        rng = np.random.default_rng(seed_for(row.name, dtype))
        g = mg.Graph()
        feeds, items = {}, []
        for ci, case in enumerate(cases_for(row, dtype)):
            arrays, in_dts = case_inputs(row, case, dtype, rng)
            attrs = case_attrs(row, case, dtype)
            ts = []
            for a, idt in zip(arrays, in_dts):
                p = g.placeholder((None,) * a.ndim if none_dims else a.shape, idt)
                feeds[p] = a
                ts.append(p)
            items.append((_case_label(ci, case, arrays), arrays, attrs, _as_tuple(build(g, row, ts, attrs))))
        return g, feeds, items

    g1, feeds1, items1 = build_all()
    g2, feeds2, items2 = build_all()
    t1 = [t for it in items1 for t in it[3]]
    t2 = [t for it in items2 for t in it[3]]
    first, second = g1.run(feeds1, t1, device=device), g1.run(feeds1, t1, device=device)
    again = g2.run(feeds2, t2, device=device)
    failures = []
    for (label, arrays, attrs, outs), (_, _, _, outs2) in zip(items1, items2):
        a = [to_numpy(first[t]) for t in outs]
        b = [to_numpy(second[t]) for t in outs]
        c = [to_numpy(again[t]) for t in outs2]
        out_dts = row.out_dtypes_for(dtype, len(outs))
        for k, t in enumerate(outs):
            if t.dtype != mg.as_dtype(out_dts[k]) or a[k].dtype != np_dtype(out_dts[k]):
                failures.append(f"{label} output {k}: dtype {t.dtype.name}/{a[k].dtype} != {out_dts[k]}")
            if not none_dims and tuple(t.shape) != a[k].shape:
                failures.append(f"{label} output {k}: static shape {t.shape} != run shape {a[k].shape}")
        if not all(np.array_equal(x, y, equal_nan=True) for x, y in zip(a, c)):
            failures.append(f"{label}: the same seed in a new graph drew different numbers")
        varied = any(np.unique(x.astype(np.float64)).size > 1 for x in a)
        if varied and all(np.array_equal(x, y, equal_nan=True) for x, y in zip(a, b)):
            failures.append(f"{label}: a second run drew the same numbers")
        try:
            row.stat_check(a, [ref_input(x, "f64") for x in arrays], attrs, dtype)
        except AssertionError as e:
            failures.append(f"{label}: {str(e).strip()}")
    if failures:
        raise AssertionError(f"{row.name} [{dtype}, {device}{', None dims' if none_dims else ''}]: "
                             f"{len(failures)} failing case(s):\n" + "\n".join(failures))


# ----------------------------------------------------------------------------------------
# reference helpers (independent of mpsgraph)


def int_ref(fn):
    """Elementwise reference on Python ints, wrapped to the inputs' dtype (two's complement)."""

    def ref(*arrays):
        dt = arrays[0].dtype
        bits = dt.itemsize * 8
        signed = dt.kind == "i"

        def wrap(v):
            v &= (1 << bits) - 1
            if signed and v >= 1 << (bits - 1):
                v -= 1 << bits
            return v

        f = np.frompyfunc(lambda *a: wrap(fn(*[int(x) for x in a], bits=bits, signed=signed)), len(arrays), 1)
        return np.asarray(f(*arrays)).astype(dt)

    return ref


def _tdiv(a, b, bits, signed):
    if b == 0:
        return 0
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _fdiv(a, b, bits, signed):
    return 0 if b == 0 else a // b


def _imod(a, b, bits, signed):
    return 0 if b == 0 else a % b  # Python's % takes the sign of the divisor, as np.mod


def _ipow(a, b, bits, signed):
    if b < 0:  # documented: 1/x**-y truncated
        return 1 if a == 1 else ((-1 if b % 2 else 1) if a == -1 else 0)
    return pow(a, b, 1 << bits)


def _shl(a, b, bits, signed):
    return 0 if b < 0 or b >= bits else a << b


def _shr(a, b, bits, signed):
    if b < 0 or b >= bits:  # numpy: a negative amount is a huge one, the sign fills the result
        return -1 if a < 0 else 0
    return a >> b


def by_kind(int_fn, float_fn):
    def ref(*arrays):
        if arrays[0].dtype.kind in "iu":
            return int_fn(*arrays)
        return float_fn(*arrays)
    return ref


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _sign_ref(x):
    # numpy's sign, keeping -0.0 as documented (np.sign(-0.0) is -0.0 on float64 too)
    return np.where(x == 0, x, np.sign(x)) if x.dtype.kind == "f" else np.sign(x)


def _relu_ref(x):
    return np.where(np.isnan(x), x, np.maximum(x, 0)) if x.dtype.kind == "f" else np.maximum(x, 0).astype(x.dtype)


def _rsqrt(x):
    return 1.0 / np.sqrt(x)


# ----------------------------------------------------------------------------------------
# case sets

UNARY_CASES = [
    Case(((2, 3),)), Case(((),), label="rank-0"), Case(((0,),), label="zero-size"),
    Case(((2, 0, 3),), label="zero-size"), Case(((4, 1, 5),)), Case(((33000,),), label="parallel"),
]
BINARY_CASES = [
    Case(((2, 3), (2, 3))), Case(((2, 3), (3,))), Case(((4, 1, 3), (2, 1))), Case(((), (2, 3))),
    Case(((2, 3), ())), Case(((), ()), label="rank-0"), Case(((0, 3), (1, 3)), label="zero-size"),
    Case(((2, 1, 0), (3, 1)), label="zero-size"), Case(((5, 1), (1, 6))),
    Case(((33000,), (33000,)), label="parallel"), Case(((300, 120), (120,)), label="parallel rows"),
    Case(((300, 1), (300, 120)), label="parallel rows"),
]
TERNARY_CASES = [
    Case(((2, 3), (2, 3), (2, 3))), Case(((2, 3), (3,), (2, 1))), Case(((), (2, 3), ())),
    Case(((4, 1, 3), (2, 1), (1,))), Case(((), (), ()), label="rank-0"),
    Case(((0, 3), (3,), (1, 3)), label="zero-size"), Case(((300, 120), (120,), (300, 1)), label="parallel rows"),
]

_NAN, _INF = float("nan"), float("inf")
F_SPECIAL_1 = [_NAN, _INF, -_INF, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.5, 1e-30, -1e-30, 65504.0,
               1e30, -1e30, 0.1, 2.0, 0.9999, -0.9999]
_SPECIAL_2 = [_NAN, _INF, -_INF, 0.0, -0.0, 1.0, -1.0, 2.5, -3.0]
F_SPECIAL_2X = [a for a in _SPECIAL_2 for _ in _SPECIAL_2]
F_SPECIAL_2Y = [b for _ in _SPECIAL_2 for b in _SPECIAL_2]


def special_unary(dtypes=FLOATS, values=F_SPECIAL_1):
    return [Case(values=(values,), dtypes=dtypes, label="special")]


def special_binary(dtypes=FLOATS):
    return [Case(values=(F_SPECIAL_2X, F_SPECIAL_2Y), dtypes=dtypes, label="special")]


def _iinfo(dtype):
    return np.iinfo(np_dtype(dtype))


def _int_edges(dtype):
    i = _iinfo(dtype)
    v = [i.min, i.min + 1, -1, 0, 1, i.max - 1, i.max, 7, -7]
    return np.array([x for x in v if i.min <= x <= i.max], dtype=np_dtype(dtype))


def _int_div_pairs(dtype):
    i = _iinfo(dtype)
    pairs = [(i.min, -1), (i.min, 1), (i.min, 2), (i.max, -1), (7, 2), (-7, 2), (7, -2), (-7, -2), (0, 0), (5, 0),
             (-5, 0), (i.max, 0), (i.min, 0), (6, 3), (-6, 3), (1, i.max), (-1, i.max), (i.min, i.max), (i.max, i.min),
             (3, i.min), (0, -3)]
    pairs = [(a, b) for a, b in pairs if i.min <= a <= i.max and i.min <= b <= i.max]
    dt = np_dtype(dtype)
    return Case(values=(lambda _d, p=pairs, dt=dt: np.array([a for a, _ in p], dt),
                        lambda _d, p=pairs, dt=dt: np.array([b for _, b in p], dt)),
                dtypes=(dtype,), label="integer edges")


INT_DIV_SPECIAL = [_int_div_pairs(d) for d in INTS]


def _int_shift_pairs(dtype):
    i = _iinfo(dtype)
    bits = np_dtype(dtype).itemsize * 8
    xs = [i.min, -1, 1, i.max, 5, -5, 0]
    ys = [0, 1, bits - 1, bits, bits + 1, -1, -bits, 3]
    pairs = [(a, b) for a in xs for b in ys if i.min <= a <= i.max and i.min <= b <= i.max]
    dt = np_dtype(dtype)
    return Case(values=(lambda _d, p=pairs, dt=dt: np.array([a for a, _ in p], dt),
                        lambda _d, p=pairs, dt=dt: np.array([b for _, b in p], dt)),
                dtypes=(dtype,), label="shift edges")


INT_SHIFT_SPECIAL = [_int_shift_pairs(d) for d in INTS]


def _int_pow_pairs(dtype):
    i = _iinfo(dtype)
    bits = np_dtype(dtype).itemsize * 8
    pairs = [(2, bits - 1), (2, bits), (2, bits + 3), (3, 40), (-1, 7), (-1, 8), (1, 1000), (0, 0), (0, 5), (i.max, 2),
             (i.min, 1), (i.min, 2), (-2, bits - 1), (1, -3), (-1, -3), (-1, -4), (2, -1), (0, -1), (-3, -2), (7, 0)]
    pairs = [(a, b) for a, b in pairs if i.min <= a <= i.max and i.min <= b <= i.max]
    dt = np_dtype(dtype)
    return Case(values=(lambda _d, p=pairs, dt=dt: np.array([a for a, _ in p], dt),
                        lambda _d, p=pairs, dt=dt: np.array([b for _, b in p], dt)),
                dtypes=(dtype,), label="power edges")


INT_POW_SPECIAL = [_int_pow_pairs(d) for d in INTS]


def _int_edge_unary(dtypes=INTS):
    return [Case(values=(_int_edges,), dtypes=dtypes, label="integer edges")]


ROWS = []


def row(*args, **kw):
    r = Row(*args, **kw)
    ROWS.append(r)
    return r


# ----------------------------------------------------------------------------------------
# unary elementwise

_SIGNED_AND_FLOATS = FLOATS + SINTS


def unary(name, ref, dtypes=FLOATS, domain=D, special=True, extra=(), **kw):
    cases = list(UNARY_CASES)
    if special and any(is_float(d) for d in dtypes):
        cases += special_unary(tuple(d for d in dtypes if is_float(d)))
    if any(is_int(d) for d in dtypes):
        cases += _int_edge_unary(tuple(d for d in dtypes if is_int(d)))
    cases += list(extra)
    return row(name, name, ref, dtypes, cases, doms=domain, **kw)


unary("identity", lambda x: x, ALL)
unary("negative", np.negative, NUMERIC, domain=dom(full_int=True), signbit=True)
unary("absolute", np.abs, NUMERIC, domain=dom(full_int=True), signbit=True)
unary("sign", _sign_ref, NUMERIC, signbit=True)
_ROUNDING_DOM = dom(lo=-6, hi=6)
_HALVES = [Case(values=([-3.5, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, -0.4, 0.4, -0.6, 0.6, 1e6 + 0.5, -0.0],),
                dtypes=FLOATS, label="halves")]
_ident = lambda x: x
unary("floor", by_kind(_ident, np.floor), NUMERIC, domain=_ROUNDING_DOM, signbit=True, extra=_HALVES)
unary("ceil", by_kind(_ident, np.ceil), NUMERIC, domain=_ROUNDING_DOM, signbit=True, extra=_HALVES)
unary("round", by_kind(_ident, np.rint), NUMERIC, domain=_ROUNDING_DOM, signbit=True, extra=_HALVES)
unary("truncate", by_kind(_ident, np.trunc), NUMERIC, domain=_ROUNDING_DOM, signbit=True, extra=_HALVES)
unary("exponent", np.exp, domain=dom(lo=-5, hi=5))
unary("exponent_base2", np.exp2, domain=dom(lo=-5, hi=5))
unary("exponent_base10", lambda x: np.power(10.0, x), domain=dom(lo=-3, hi=3))
_POS = dom(lo=0.01, hi=10)
unary("logarithm", np.log, domain=_POS)
unary("logarithm_base2", np.log2, domain=_POS)
unary("log1p", np.log1p, domain=dom(lo=-0.9, hi=5))
unary("expm1", np.expm1, domain=dom(lo=-5, hi=5))
unary("logarithm_base10", np.log10, domain=_POS)
unary("square", np.square, NUMERIC, domain=dom(full_int=True))
unary("square_root", np.sqrt, domain=dom(lo=0, hi=10), signbit=True)
unary("reverse_square_root", _rsqrt, domain=dom(lo=0.01, hi=10))
unary("reciprocal", np.reciprocal, domain=dom(nonzero=True))
unary("sin", np.sin, domain=dom(lo=-7, hi=7))
unary("cos", np.cos, domain=dom(lo=-7, hi=7))
unary("tan", np.tan, domain=dom(lo=-1.4, hi=1.4))
unary("sinh", np.sinh)
unary("cosh", np.cosh)
unary("tanh", np.tanh, domain=dom(lo=-5, hi=5))
_UNIT = dom(lo=-1, hi=1)
unary("asin", np.arcsin, domain=_UNIT)
unary("acos", np.arccos, domain=_UNIT)
unary("atan", np.arctan, domain=dom(lo=-10, hi=10))
unary("asinh", np.arcsinh, domain=dom(lo=-10, hi=10))
unary("acosh", np.arccosh, domain=dom(lo=1, hi=10))
unary("atanh", np.arctanh, domain=dom(lo=-0.99, hi=0.99))
unary("erf", _erf, domain=dom(lo=-3, hi=3))
unary("sigmoid", _sigmoid, domain=dom(lo=-10, hi=10))
unary("relu", _relu_ref, NUMERIC, domain=dom(full_int=True))
unary("logical_not", np.logical_not, ("bool",))
unary("isnan", np.isnan, NUMERIC, out_dtype="bool")
unary("isinf", np.isinf, NUMERIC, out_dtype="bool")
unary("isfinite", np.isfinite, NUMERIC, out_dtype="bool")
unary("bitwise_not", np.invert, INTS + ("bool",), domain=dom(full_int=True))

# aliases resolve to the same op: one row each keeps the Python names honest
for _alias, _ref, _dts, _dom in [("exp", np.exp, FLOATS, D), ("log", np.log, FLOATS, _POS), ("sqrt", np.sqrt, FLOATS, _POS),
                                 ("neg", np.negative, NUMERIC, D), ("abs", np.abs, NUMERIC, D), ("rint", np.rint, FLOATS, D),
                                 ("trunc", np.trunc, FLOATS, D), ("arctanh", np.arctanh, FLOATS, dom(lo=-0.9, hi=0.9)),
                                 ("invert", np.invert, INTS, D), ("not_", np.logical_not, ("bool",), D)]:
    row("alias_" + _alias, _alias, _ref, _dts, [Case(((2, 3),)), Case(((),))], doms=_dom)


# ---- cast: one row per destination dtype ----


def _cast_dom(dst):
    def draw(rng, shape, src):
        sdt = np_dtype(src)
        if src == "bool":
            return rng.random(shape) < 0.5
        if dst == "bool":
            a = Dom(lo=-2, hi=2).draw(rng, shape, src)
            zero_mask = rng.random(shape) < 0.3
            return np.where(zero_mask, sdt.type(0), a).astype(sdt)
        if is_int(src):
            if is_float(dst) and dst in HALF:
                return Dom(ilo=-2000, ihi=2000).draw(rng, shape, src)  # exactly representable in float32
            return Dom(full_int=True).draw(rng, shape, src)  # int->int wraps as numpy; int->float rounds
        # float source
        if is_int(dst):
            info = _iinfo(dst)
            lo, hi = max(float(info.min), -1000.0), min(float(info.max), 1000.0)
            if src == "float16":
                lo, hi = max(lo, -1000.0), min(hi, 1000.0)
            return Dom(lo=lo, hi=hi).draw(rng, shape, src)  # in range: truncation toward zero
        return Dom(lo=-100, hi=100).draw(rng, shape, src)
    return draw


class _CallDom(Dom):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def draw(self, rng, shape, dtype):
        return self.fn(rng, shape, dtype)


def _cast_ref(dst):
    def ref(x, dtype=None):
        x = np.asarray(x)
        if dst in HALF and x.dtype.kind in "fiu" and x.dtype != np_dtype(dst):
            if x.dtype.kind in "iu":  # the drawn integers are exact in float64
                assert x.size == 0 or np.abs(x.astype(np.float64)).max() < 2.0 ** 53
            return round_to_half(x.astype(np.float64), dst)  # correctly rounded from the exact value
        with np.errstate(all="ignore"):
            return x.astype(np_dtype(dst))
    return ref


def _cast_saturating_ref(dst):
    """Documented: float -> integer truncates toward zero, saturates, NaN -> 0."""
    def ref(x, dtype=None):
        info = _iinfo(dst)
        x = np.asarray(x, dtype=np.float64)
        t = np.trunc(np.nan_to_num(x, nan=0.0, posinf=np.inf, neginf=-np.inf))
        out = np.empty(x.shape, dtype=object)
        for idx in np.ndindex(x.shape):
            v = t[idx]
            out[idx] = info.min if v <= info.min else info.max if v >= info.max else int(v)
        return out.astype(np_dtype(dst))
    return ref


_FLOAT_CAST_SPECIAL = [_NAN, _INF, -_INF, -0.0, 0.0, 65504.0, 65519.0, 65520.0, 1e5, 1e-8, 6e-8, 3e-8, 6.1e-5,
                       1e-40, 1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8,
                       3.0e38, 3.4e38, -3.4e38, 1e300, 1.0 + 2.0 ** -24 + 2.0 ** -50, 1.0 + 3 * 2.0 ** -24]
_SAT_SPECIAL = [_NAN, _INF, -_INF, 1e30, -1e30, 0.0, -0.0, 0.999, -0.999, 127.9, -128.9, 128.5, 255.5, 256.0, -1.5,
                2147483647.0, 2147483648.0, -2147483649.0, 4294967296.0, 9.3e18, -9.3e18, 1.9e19]

for _dst in ALL:
    _cases = [Case(((2, 3),)), Case(((),)), Case(((0, 2),)), Case(((33000,),))]
    if is_float(_dst):
        _cases.append(Case(values=(_FLOAT_CAST_SPECIAL,), dtypes=FLOATS, label="float special"))
        _cases.append(Case(values=(_int_edges,), dtypes=tuple(d for d in INTS if _dst not in HALF), label="int edges"))
    if _dst == "bool":
        _cases.append(Case(values=([_NAN, _INF, -0.0, 0.0, 1e-30, -1.0],), dtypes=FLOATS, label="to bool"))
        _cases.append(Case(values=(_int_edges,), dtypes=INTS, label="int edges"))
    if is_int(_dst):
        _cases.append(Case(values=(_int_edges,), dtypes=INTS, label="int edges (wrap)"))
    row(f"cast_to_{_dst}", "cast", _cast_ref(_dst), ALL, [Case(c.shapes, {"dtype": _dst}, c.values, c.dtypes, c.label)
                                                          for c in _cases],
        doms=_CallDom(_cast_dom(_dst)), out_dtype=_dst, signbit=is_float(_dst),
        skip_devices={k: "float64 is CPU-only (test_float64_is_refused_off_cpu checks the refusal)" for k in ("metal", "cuda")}
        if _dst == "float64" else {})
    if is_int(_dst):
        row(f"cast_saturating_to_{_dst}", "cast", _cast_saturating_ref(_dst), FLOATS,
            [Case(values=(_SAT_SPECIAL,), attrs={"dtype": _dst}, label="saturate / nan")], out_dtype=_dst)

# float64 -> float16/bfloat16 must round once (numpy and ml_dtypes do); rounding through
# float32 first gives a different answer just above a half-way point.
for _dst in HALF:
    row(f"cast_float64_to_{_dst}_single_rounding", "cast", _cast_ref(_dst), ("float64",),
        [Case(values=([1.0 + 2.0 ** -11 + 2.0 ** -40, 1.0 + 2.0 ** -8 + 2.0 ** -40, -(1.0 + 2.0 ** -8 + 2.0 ** -40),
                       2049.0 + 2.0 ** -30],), attrs={"dtype": _dst})], out_dtype=_dst)

row("astype_method", lambda g, x, dtype: x.astype(dtype), _cast_ref("int32"), ("float32", "float64", "int64"),
    [Case(((2, 3),), {"dtype": "int32"})], doms=dom(lo=-100, hi=100), out_dtype="int32")


# ----------------------------------------------------------------------------------------
# binary elementwise


def binary(name, ref, dtypes, doms=D, special=True, extra=(), op=None, **kw):
    cases = list(BINARY_CASES)
    if special and any(is_float(d) for d in dtypes):
        cases += special_binary(tuple(d for d in dtypes if is_float(d)))
    cases += list(extra)
    return row(name, op or name, ref, dtypes, cases, doms=doms, **kw)


_FULL = dom(full_int=True)
binary("addition", np.add, NUMERIC, _FULL, signbit=True)
binary("subtraction", np.subtract, NUMERIC, _FULL, signbit=True)
binary("multiplication", np.multiply, NUMERIC, _FULL, signbit=True)
binary("division", by_kind(int_ref(_tdiv), np.true_divide), NUMERIC,
       (_FULL, dom(lo=-3, hi=3, ilo=-6, ihi=6)), extra=INT_DIV_SPECIAL, signbit=True)
binary("floor_division", by_kind(int_ref(_fdiv), np.floor_divide), NUMERIC,
       (dom(lo=-10, hi=10, full_int=True), dom(lo=-3, hi=3, ilo=-6, ihi=6)), extra=INT_DIV_SPECIAL,
       ref_precision="same")
binary("modulo", by_kind(int_ref(_imod), np.mod), NUMERIC,
       (dom(lo=-10, hi=10, full_int=True), dom(lo=-3, hi=3, ilo=-6, ihi=6)), extra=INT_DIV_SPECIAL,
       ref_precision="same", signbit=True)
binary("power", by_kind(int_ref(_ipow), np.power), NUMERIC, (dom(lo=0.1, hi=3, full_int=True), dom(lo=-3, hi=3, ilo=0, ihi=20)),
       extra=INT_POW_SPECIAL)
row("power_negative_base", "power", np.power, FLOATS, [Case(((3, 4), (3, 4))), Case(((7,), ()))],
    doms=(dom(lo=-3, hi=3), dom(lo=-4, hi=4, integral=True)))
binary("maximum", np.maximum, NUMERIC, _FULL)
binary("minimum", np.minimum, NUMERIC, _FULL)
binary("atan2", np.arctan2, FLOATS, signbit=True)
for _cmp, _ref in [("equal", np.equal), ("not_equal", np.not_equal), ("less_than", np.less),
                   ("less_than_or_equal_to", np.less_equal), ("greater_than", np.greater),
                   ("greater_than_or_equal_to", np.greater_equal)]:
    # small ranges so that equal values occur
    binary(_cmp, _ref, ALL, dom(lo=-2, hi=2, ilo=-3, ihi=3, integral=True), out_dtype="bool",
           extra=[Case(values=(_int_edges, lambda d: _int_edges(d)[::-1]), dtypes=INTS, label="edges")])
    row(_cmp + "_fractional", _cmp, _ref, FLOATS, [Case(((4, 5), (5,)))], out_dtype="bool")
for _lg, _ref in [("logical_and", np.logical_and), ("logical_or", np.logical_or), ("logical_xor", np.logical_xor)]:
    binary(_lg, _ref, ("bool",))
for _bw, _ref in [("bitwise_and", np.bitwise_and), ("bitwise_or", np.bitwise_or), ("bitwise_xor", np.bitwise_xor)]:
    binary(_bw, _ref, INTS + ("bool",), _FULL)


def _shift_dom(rng, shape, dtype):
    bits = np_dtype(dtype).itemsize * 8
    lo = -2 if dtype in SINTS else 0
    return rng.integers(lo, bits + 2, size=shape, endpoint=True).astype(np_dtype(dtype))


binary("bitwise_left_shift", int_ref(_shl), INTS, (_FULL, _CallDom(_shift_dom)), extra=INT_SHIFT_SPECIAL)
binary("bitwise_right_shift", int_ref(_shr), INTS, (_FULL, _CallDom(_shift_dom)), extra=INT_SHIFT_SPECIAL)

for _alias, _ref, _dts in [("add", np.add, NUMERIC), ("subtract", np.subtract, NUMERIC),
                           ("multiply", np.multiply, NUMERIC), ("divide", np.true_divide, FLOATS),
                           ("floor_divide", np.floor_divide, FLOATS), ("mod", np.mod, FLOATS),
                           ("pow", np.power, ("float32",)), ("arctan2", np.arctan2, FLOATS),
                           ("less", np.less, NUMERIC), ("greater_equal", np.greater_equal, NUMERIC)]:
    row("alias_" + _alias, _alias, _ref, _dts, [Case(((2, 3), (3,)))],
        doms=(dom(lo=0.5, hi=3, ilo=0, ihi=5), dom(lo=0.5, hi=3, ilo=1, ihi=5)),
        out_dtype="bool" if _alias in ("less", "greater_equal") else None, ref_precision="same")


# ---- select / clamp ----

def _select_ref(p, x, y):
    return np.where(p != 0, x, y)


row("select", "select", _select_ref, ALL, TERNARY_CASES, doms=(D, D, D),
    input_dtypes=lambda d: ("bool", d, d))
row("select_numeric_predicate", "select", _select_ref, ("float32", "int32", "uint8", "float16"), TERNARY_CASES,
    doms=(dom(lo=-1, hi=1, integral=True, ilo=0, ihi=2), D, D), input_dtypes=lambda d: (d, d, d))
row("where_alias", "where", _select_ref, ("float32",), [Case(((2, 3), (2, 3), ()))], input_dtypes=lambda d: ("bool", d, d))
row("select_nan", "select", _select_ref, FLOATS,
    [Case(values=([True, False, True, False], [_NAN, _NAN, -0.0, 1.0], [1.0, _NAN, 2.0, -0.0]))],
    input_dtypes=lambda d: ("bool", d, d), signbit=True)


def _clamp_ref(x, lo, hi):
    return np.minimum(np.maximum(x, lo), hi)


row("clamp", "clamp", _clamp_ref, NUMERIC, TERNARY_CASES + [
    Case(values=([_NAN, -5.0, 5.0, 0.5, 1.5], [-1.0, -1.0, -1.0, 1.0, _NAN], [1.0, 1.0, 1.0, 0.0, 2.0]),
         dtypes=FLOATS, label="nan / crossed bounds")],
    doms=(dom(full_int=True), dom(lo=-2, hi=0, ilo=-10, ihi=0), dom(lo=0, hi=2, ilo=0, ihi=10)))
row("clip_alias", "clip", _clamp_ref, ("float32",), [Case(((2, 3), (), ()))])


# ---- operators and Python scalars (scalars take the tensor's dtype) ----

def _scalar(v, like):
    return np.asarray(v).astype(like.dtype)


_OPERATOR_ROWS = [
    ("op_add", lambda g, x, y: x + y, np.add, NUMERIC, _FULL),
    ("op_sub", lambda g, x, y: x - y, np.subtract, NUMERIC, _FULL),
    ("op_mul", lambda g, x, y: x * y, np.multiply, NUMERIC, _FULL),
    ("op_truediv", lambda g, x, y: x / y, by_kind(int_ref(_tdiv), np.true_divide), NUMERIC,
     (D, dom(nonzero=True, ilo=-6, ihi=6))),
    ("op_floordiv", lambda g, x, y: x // y, by_kind(int_ref(_fdiv), np.floor_divide), NUMERIC,
     (D, dom(nonzero=True, ilo=-6, ihi=6))),
    ("op_mod", lambda g, x, y: x % y, by_kind(int_ref(_imod), np.mod), NUMERIC, (D, dom(nonzero=True, ilo=-6, ihi=6))),
    ("op_pow", lambda g, x, y: x ** y, by_kind(int_ref(_ipow), np.power), NUMERIC,
     (dom(lo=0.1, hi=3), dom(lo=-2, hi=2, ilo=0, ihi=6))),
    ("op_lt", lambda g, x, y: x < y, np.less, ALL, dom(ilo=-2, ihi=2, integral=True)),
    ("op_le", lambda g, x, y: x <= y, np.less_equal, ALL, dom(ilo=-2, ihi=2, integral=True)),
    ("op_gt", lambda g, x, y: x > y, np.greater, ALL, dom(ilo=-2, ihi=2, integral=True)),
    ("op_ge", lambda g, x, y: x >= y, np.greater_equal, ALL, dom(ilo=-2, ihi=2, integral=True)),
    ("op_eq", lambda g, x, y: x == y, np.equal, ALL, dom(ilo=-2, ihi=2, integral=True)),
    ("op_ne", lambda g, x, y: x != y, np.not_equal, ALL, dom(ilo=-2, ihi=2, integral=True)),
    ("op_and", lambda g, x, y: x & y, np.bitwise_and, INTS + ("bool",), _FULL),
    ("op_or", lambda g, x, y: x | y, np.bitwise_or, INTS + ("bool",), _FULL),
    ("op_xor", lambda g, x, y: x ^ y, np.bitwise_xor, INTS + ("bool",), _FULL),
    ("op_lshift", lambda g, x, y: x << y, int_ref(_shl), INTS, (_FULL, _CallDom(_shift_dom))),
    ("op_rshift", lambda g, x, y: x >> y, int_ref(_shr), INTS, (_FULL, _CallDom(_shift_dom))),
]
for _n, _op, _ref, _dts, _doms in _OPERATOR_ROWS:
    _bool_out = _n in ("op_lt", "op_le", "op_gt", "op_ge", "op_eq", "op_ne")
    row(_n, _op, _ref, _dts, [Case(((2, 3), (3,))), Case(((), (4,))), Case(((0, 2), (2,)))], doms=_doms,
        out_dtype="bool" if _bool_out else None)

row("op_neg", lambda g, x: -x, np.negative, NUMERIC, [Case(((2, 3),)), Case(((),))], doms=_FULL)
row("op_abs", lambda g, x: abs(x), np.abs, NUMERIC, [Case(((2, 3),))], doms=_FULL)
row("op_invert", lambda g, x: ~x, np.invert, INTS + ("bool",), [Case(((2, 3),))], doms=_FULL)
row("op_pos", lambda g, x: +x, lambda x: x, NUMERIC, [Case(((2, 3),))])

# Python scalars take the tensor's dtype (ints wrap in the tensor's dtype)
_SCALAR_ROWS = [
    ("scalar_add_int", lambda g, x: x + 3, lambda x: x + _scalar(3, x), NUMERIC, _FULL),
    ("scalar_radd_int", lambda g, x: 3 + x, lambda x: _scalar(3, x) + x, NUMERIC, _FULL),
    ("scalar_rsub_int", lambda g, x: 2 - x, lambda x: _scalar(2, x) - x, NUMERIC, _FULL),
    ("scalar_mul_int", lambda g, x: x * 5, lambda x: x * _scalar(5, x), NUMERIC, _FULL),
    ("scalar_rmul_int", lambda g, x: 5 * x, lambda x: _scalar(5, x) * x, NUMERIC, _FULL),
    ("scalar_truediv_int", lambda g, x: x / 2, by_kind(lambda x: int_ref(_tdiv)(x, _scalar(2, x)),
                                                      lambda x: x / 2.0), NUMERIC, _FULL),
    ("scalar_rtruediv", lambda g, x: 1 / x, lambda x: 1.0 / x, FLOATS, dom(nonzero=True)),
    ("scalar_floordiv", lambda g, x: x // 3, by_kind(lambda x: int_ref(_fdiv)(x, _scalar(3, x)),
                                                     lambda x: np.floor_divide(x, np.float32(3))), NUMERIC, _FULL),
    ("scalar_mod", lambda g, x: x % 3, by_kind(lambda x: int_ref(_imod)(x, _scalar(3, x)),
                                               lambda x: np.mod(x, np.float32(3))), NUMERIC, _FULL),
    ("scalar_pow", lambda g, x: x ** 2, lambda x: x * x, NUMERIC, _FULL),
    ("scalar_rpow", lambda g, x: 2 ** x, by_kind(lambda x: int_ref(_ipow)(_scalar(2, x), x), lambda x: np.exp2(x)),
     NUMERIC, dom(ilo=0, ihi=12)),
    ("scalar_add_float", lambda g, x: x + 2.5, lambda x: x + 2.5, FLOATS, D),
    ("scalar_mul_float", lambda g, x: 0.25 * x, lambda x: x * 0.25, FLOATS, D),
    # 0.1 is rounded to float32 first: the product of two float32 values is exact in float64
    ("scalar_mul_0.1_float32", lambda g, x: x * 0.1, lambda x: x * np.float64(np.float32(0.1)), ("float32",), D),
    ("scalar_lt", lambda g, x: x < 1, lambda x: x < 1, NUMERIC, dom(ilo=-2, ihi=3, integral=True)),
    ("scalar_ge_float", lambda g, x: x >= 0.5, lambda x: x >= 0.5, FLOATS, D),
    ("scalar_eq", lambda g, x: x == 2, lambda x: x == 2, NUMERIC, dom(ilo=0, ihi=3, integral=True, lo=0, hi=3)),
    ("scalar_rcmp", lambda g, x: 1 < x, lambda x: x > 1, NUMERIC, dom(ilo=-2, ihi=3, integral=True)),
    ("scalar_float_integral_into_int", lambda g, x: x + 2.0, lambda x: x + _scalar(2, x), INTS, _FULL),
    ("scalar_numpy_scalar", lambda g, x: x * np.float64(0.5), lambda x: x * 0.5, FLOATS, D),
    ("scalar_bool_and", lambda g, x: x & True, lambda x: x & True, ("bool",), D),
    ("scalar_select", lambda g, p, x: g.select(p, x, 0), lambda p, x: np.where(p, x, 0), ("float32", "int8"), D),
]
for _n, _op, _ref, _dts, _dom in _SCALAR_ROWS:
    _bool_out = _n in ("scalar_lt", "scalar_ge_float", "scalar_eq", "scalar_rcmp")
    if _n == "scalar_select":
        row(_n, _op, _ref, _dts, [Case(((2, 3), (2, 3)))], input_dtypes=lambda d: ("bool", d))
        continue
    row(_n, _op, _ref, _dts, [Case(((2, 3),)), Case(((),)), Case(((0,),))], doms=_dom,
        out_dtype="bool" if _bool_out else None,
        ref_precision="same" if _n in ("scalar_floordiv", "scalar_mod") else "f64")


# ----------------------------------------------------------------------------------------
# reductions (helper "red")


def _axes(axes):
    if axes is None:
        return None
    if isinstance(axes, (int, np.integer)):
        return (int(axes),)
    return tuple(axes)


def red_ref(fn, **fixed):
    def ref(x, axes=None, keep_dims=True):
        return fn(x, axis=_axes(axes), keepdims=keep_dims, **fixed)
    return ref


def _np_sum(x, axis, keepdims):
    return np.sum(x, axis=axis, keepdims=keepdims, dtype=x.dtype)


def _np_prod(x, axis, keepdims):
    return np.prod(x, axis=axis, keepdims=keepdims, dtype=x.dtype)


def _np_lse(x, axis, keepdims):
    with np.errstate(divide="ignore"):
        return np.log(np.sum(np.exp(x), axis=axis, keepdims=keepdims))


_RED_CASES = [
    Case(((2, 3, 4),), {}), Case(((2, 3, 4),), {"axes": None}), Case(((2, 3, 4),), {"axes": 1}),
    Case(((2, 3, 4),), {"axes": -1}), Case(((2, 3, 4),), {"axes": (0, 2)}), Case(((2, 3, 4),), {"axes": (-1, 0)}),
    Case(((2, 3, 4),), {"axes": [1], "keep_dims": False}), Case(((2, 3, 4),), {"axes": (0, 2), "keep_dims": False}),
    Case(((2, 3, 4),), {"axes": None, "keep_dims": False}), Case(((2, 3, 4),), {"axes": (0, 1, 2), "keep_dims": True}),
    Case(((),), {}, label="rank-0"), Case(((),), {"keep_dims": False}, label="rank-0"),
    Case(((5,),), {"axes": 0, "keep_dims": False}), Case(((0, 3),), {"axes": 1}, label="zero-size, non-empty axis"),
    Case(((300, 130),), {"axes": 1, "keep_dims": False}, label="parallel"), Case(((300, 130),), {"axes": 0}),
]
_RED_EMPTY = [Case(((0, 3),), {"axes": 0}, label="empty axis (identity)"),
              Case(((2, 0),), {"axes": None, "keep_dims": False}, label="empty (identity)")]
_RED_TOL = {"float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2), "float32": (1e-5, 1e-5), "float64": (1e-12, 1e-12)}
_RED_POS = dom(lo=0.25, hi=2.0, full_int=True)

row("reduction_sum", "reduction_sum", red_ref(_np_sum), NUMERIC, _RED_CASES + _RED_EMPTY, doms=_RED_POS, tol=_RED_TOL)
row("reduction_product", "reduction_product", red_ref(_np_prod), NUMERIC, _RED_CASES + _RED_EMPTY,
    doms=dom(lo=0.8, hi=1.25, full_int=True), tol=_RED_TOL)
row("reduction_maximum", "reduction_maximum", red_ref(np.max), NUMERIC, _RED_CASES, doms=_FULL)
row("reduction_minimum", "reduction_minimum", red_ref(np.min), NUMERIC, _RED_CASES, doms=_FULL)
row("mean", "mean", red_ref(np.mean), FLOATS, _RED_CASES, doms=dom(lo=-1, hi=2), tol=_RED_TOL)
row("variance", "variance", red_ref(np.var), FLOATS, _RED_CASES, doms=dom(lo=-1, hi=2), tol=_RED_TOL)
row("reduction_and", "reduction_and", red_ref(np.all), ("bool",), _RED_CASES + _RED_EMPTY,
    doms=_CallDom(lambda rng, s, d: rng.random(s) < 0.8))
row("reduction_or", "reduction_or", red_ref(np.any), ("bool",), _RED_CASES + _RED_EMPTY,
    doms=_CallDom(lambda rng, s, d: rng.random(s) < 0.2))
row("logsumexp", "logsumexp", red_ref(_np_lse), FLOATS, _RED_CASES + _RED_EMPTY, doms=dom(lo=-3, hi=3), tol=_RED_TOL)
_NAN_ROWS = [[1.0, _NAN, 2.0], [1.0, _INF, -_INF], [-_INF, -_INF, -_INF], [3.0, -0.0, 0.0]]
row("reduction_sum_special", "reduction_sum", red_ref(_np_sum), FLOATS, [Case(values=(_NAN_ROWS,), attrs={"axes": 1})])
# documented: NaN propagates through maximum/minimum
row("reduction_maximum_special", "reduction_maximum", red_ref(np.max), FLOATS,
    [Case(values=(_NAN_ROWS,), attrs={"axes": 1}), Case(values=(_NAN_ROWS,), attrs={"axes": 0})])
row("reduction_minimum_special", "reduction_minimum", red_ref(np.min), FLOATS,
    [Case(values=(_NAN_ROWS,), attrs={"axes": 1}), Case(values=(_NAN_ROWS,), attrs={"axes": 0})])
row("logsumexp_special", "logsumexp", red_ref(_np_lse), FLOATS,
    [Case(values=([[0.0, -_INF, 1.0], [-_INF, -_INF, -_INF], [_INF, 1.0, 2.0], [80.0, 80.0, 79.0]],),
          attrs={"axes": 1})], tol=_RED_TOL)
# documented: the mean of nothing is nan
row("mean_empty", "mean", red_ref(np.mean), FLOATS, [Case(((0, 3),), {"axes": 0}), Case(((2, 0),), {})])
# documented: and/or treat nonzero as true, for any dtype
row("reduction_and_numeric", "reduction_and", red_ref(np.all), ("float32", "int32", "uint8", "float16"),
    [Case(((3, 4),), {"axes": 1}), Case(((3, 4),), {}), Case(values=([[_NAN, 1.0, -0.0], [0.5, 2.0, -1.0]],), dtypes=FLOATS)],
    doms=dom(lo=-1, hi=1, integral=True, ilo=0, ihi=2), out_dtype="bool")
row("reduction_or_numeric", "reduction_or", red_ref(np.any), ("float32", "int32", "uint8", "float16"),
    [Case(((3, 4),), {"axes": 0}), Case(((3, 4),), {}), Case(values=([[_NAN, 0.0, -0.0], [0.0, 0.0, -0.0]],), dtypes=FLOATS,
                                                           attrs={"axes": 1})],
    doms=dom(lo=-0.6, hi=0.6, integral=True, ilo=0, ihi=1), out_dtype="bool")


def _arg_ref(fn):
    def ref(x, axis=None, keep_dims=True, dtype="int32"):
        return fn(x, axis=axis, keepdims=keep_dims).astype(np_dtype(dtype))
    return ref


_ARG_CASES = [
    Case(((3, 4, 5),), {"axis": 0, "keep_dims": False}), Case(((3, 4, 5),), {"axis": 1, "keep_dims": True}),
    Case(((3, 4, 5),), {"axis": -1, "keep_dims": False}), Case(((7,),), {"axis": 0, "keep_dims": False}),
    Case(((3, 4, 5),), {"axis": 2}, label="keep_dims default"),
    Case(((0, 4),), {"axis": 1, "keep_dims": False}, label="zero-size, non-empty axis"),
    Case(((300, 130),), {"axis": 1, "keep_dims": False}, label="parallel"),
]
# small integer ranges make ties: numpy returns the first index
row("reduction_arg_maximum", "reduction_arg_maximum", _arg_ref(np.argmax), NUMERIC, _ARG_CASES,
    doms=dom(ilo=-3, ihi=3, integral=True, lo=-3, hi=3), out_dtype="int32")
row("reduction_arg_minimum", "reduction_arg_minimum", _arg_ref(np.argmin), NUMERIC, _ARG_CASES,
    doms=dom(ilo=-3, ihi=3, integral=True, lo=-3, hi=3), out_dtype="int32")
# documented: a NaN counts as the extreme, the first NaN wins (numpy)
row("reduction_arg_special", "reduction_arg_maximum", _arg_ref(np.argmax), FLOATS,
    [Case(values=([[1.0, _NAN, 3.0, _NAN], [_INF, 2.0, _INF, 0.0], [-_INF, -_INF, -_INF, -_INF]],),
          attrs={"axis": 1, "keep_dims": False})], out_dtype="int32")
row("reduction_argmin_special", "reduction_arg_minimum", _arg_ref(np.argmin), FLOATS,
    [Case(values=([[1.0, _NAN, -3.0, _NAN], [-_INF, 2.0, -_INF, 0.0], [-0.0, 0.0, 5.0, -0.0]],),
          attrs={"axis": 1, "keep_dims": False})], out_dtype="int32")
row("reduction_arg_maximum_int64", "reduction_arg_maximum", _arg_ref(np.argmax), ("float32", "int8"),
    [Case(((3, 4),), {"axis": 1, "keep_dims": False, "dtype": "int64"})], out_dtype="int64")


# numpy-named sugar with numpy defaults (axis=None, keepdims=False)
def np_red(fn, **fixed):
    def ref(x, axis=None, keepdims=False):
        return fn(x, axis=_axes(axis), keepdims=keepdims, **fixed)
    return ref


_NP_RED_CASES = [
    Case(((2, 3, 4),), {}), Case(((2, 3, 4),), {"axis": 1}), Case(((2, 3, 4),), {"axis": (0, 2)}),
    Case(((2, 3, 4),), {"axis": -1, "keepdims": True}), Case(((),), {}), Case(((0, 2),), {"axis": 1}),
]
row("sugar_sum", "sum", np_red(_np_sum), NUMERIC, _NP_RED_CASES, doms=_RED_POS, tol=_RED_TOL)
row("sugar_prod", "prod", np_red(_np_prod), NUMERIC, _NP_RED_CASES, doms=dom(lo=0.8, hi=1.25, full_int=True), tol=_RED_TOL)
row("sugar_max", "max", np_red(np.max), NUMERIC, _NP_RED_CASES, doms=_FULL)
row("sugar_min", "min", np_red(np.min), NUMERIC, _NP_RED_CASES, doms=_FULL)
row("sugar_var", "var", np_red(np.var), FLOATS, _NP_RED_CASES, tol=_RED_TOL)
row("sugar_all", "all", np_red(np.all), ("bool",), _NP_RED_CASES)
row("sugar_any", "any", np_red(np.any), ("bool",), _NP_RED_CASES)


def _np_arg(fn):
    def ref(x, axis=None, keepdims=False):
        r = fn(x, axis=axis, keepdims=keepdims)
        return np.asarray(r).astype(np.int32)
    return ref


_NP_ARG_CASES = [Case(((3, 4),), {}), Case(((3, 4),), {"axis": 0}), Case(((3, 4, 2),), {"axis": -1}),
                 Case(((3, 4),), {"axis": 1, "keepdims": True})]
row("sugar_argmax", "argmax", _np_arg(np.argmax), NUMERIC, _NP_ARG_CASES,
    doms=dom(ilo=-3, ihi=3, integral=True, lo=-3, hi=3), out_dtype="int32")
row("sugar_argmin", "argmin", _np_arg(np.argmin), NUMERIC, _NP_ARG_CASES,
    doms=dom(ilo=-3, ihi=3, integral=True, lo=-3, hi=3), out_dtype="int32")
row("tensor_method_sum", lambda g, x, **a: x.sum(**a), np_red(_np_sum), ("float32", "int32"),
    [Case(((2, 3),), {"axis": 0})], doms=_RED_POS, tol=_RED_TOL)


# ----------------------------------------------------------------------------------------
# matrix multiplication


_MM_CASES = [
    Case(((2, 3), (3, 4))), Case(((3,), (3, 4)), label="1-D lhs"), Case(((2, 3), (3,)), label="1-D rhs"),
    Case(((3,), (3,)), label="1-D both"), Case(((2, 2, 3), (3, 4)), label="batch lhs"),
    Case(((3, 4), (2, 4, 5)), label="batch rhs"), Case(((2, 1, 3, 4), (5, 4, 2)), label="broadcast batch"),
    Case(((2, 0), (0, 3)), label="zero inner dim"), Case(((0, 3), (3, 2)), label="zero rows"),
    Case(((1, 1), (1, 1))), Case(((17, 33), (33, 9))), Case(((4, 2, 3), (3,)), label="batch x 1-D"),
    Case(((3, 65, 130), (130, 67)), label="large"), Case(((2, 1, 40, 96), (3, 96, 50)), label="large broadcast batch"),
]
_MM_TOL = {"float16": (1e-2, 1e-2), "bfloat16": (2e-2, 6e-2), "float32": (1e-5, 1e-5), "float64": (1e-12, 1e-12)}


def _matmul_ref(a, b):
    if a.dtype.kind in "iu":  # wraps in the dtype, as the op's integer arithmetic
        return np.matmul(a.astype(np.uint64), b.astype(np.uint64)).astype(a.dtype)
    return np.matmul(a, b)


_MM_DOM = dom(lo=-1, hi=1, full_int=True)
row("matrix_multiplication", "matrix_multiplication", _matmul_ref, NUMERIC, _MM_CASES, doms=_MM_DOM, tol=_MM_TOL)
row("matmul_alias", "matmul", _matmul_ref, ("float32", "int32"), _MM_CASES[:4], doms=_MM_DOM, tol=_MM_TOL)
row("matmul_operator", lambda g, a, b: a @ b, _matmul_ref, ("float32", "float16", "int64"), _MM_CASES, doms=_MM_DOM,
    tol=_MM_TOL)
row("matmul_rmatmul_numpy", lambda g, b: np.ones((2, 3), np.float32) @ b, lambda b: np.ones((2, 3)) @ b,
    ("float32",), [Case(((3, 4),))], tol=_MM_TOL)


# ----------------------------------------------------------------------------------------
# shape ops (helper "shape"): exact for every dtype

_SHAPE_DOM = dom(full_int=True, lo=-100, hi=100)


def shape_row(name, op, ref, cases, dtypes=ALL, **kw):
    return row(name, op, ref, dtypes, cases, doms=_SHAPE_DOM, **kw)


shape_row("reshape", "reshape", lambda x, shape: np.reshape(x, shape), [
    Case(((2, 3, 4),), {"shape": (6, 4)}), Case(((2, 3, 4),), {"shape": (-1, 4)}), Case(((2, 3, 4),), {"shape": (4, -1, 3)}),
    Case(((2, 3, 4),), {"shape": (24,)}), Case(((1,),), {"shape": ()}), Case(((),), {"shape": (1, 1)}),
    Case(((0, 3),), {"shape": (3, 0)}), Case(((0, 3),), {"shape": (-1, 3)}), Case(((6,),), {"shape": [2, 3]})])
shape_row("transpose", "transpose", lambda x, permutation=None: np.transpose(x, permutation), [
    Case(((2, 3, 4),), {"permutation": (2, 0, 1)}), Case(((2, 3, 4),), {"permutation": (0, 2, 1)}),
    Case(((2, 3),), {"permutation": (1, 0)}), Case(((2, 3, 4),), {}, label="default reverses"),
    Case(((5,),), {"permutation": (0,)}), Case(((0, 3),), {"permutation": (1, 0)}), Case(((),), {"permutation": ()}),
    Case(((2, 3, 4, 5),), {"permutation": (3, 1, 0, 2)}), Case(((64, 70),), {"permutation": (1, 0)})])
shape_row("tensor_T", lambda g, x: x.T, lambda x: x.T, [Case(((2, 3),)), Case(((2, 3, 4),))])
shape_row("expand_dims", "expand_dims", lambda x, axes: np.expand_dims(x, _axes(axes)), [
    Case(((2, 3),), {"axes": 0}), Case(((2, 3),), {"axes": -1}), Case(((2, 3),), {"axes": (0, 3)}),
    Case(((),), {"axes": 0}), Case(((2, 3),), {"axes": [1, -1]}), Case(((0,),), {"axes": 1})])


def _squeeze_ref(x, axes=None):
    return np.squeeze(x, _axes(axes))


shape_row("squeeze", "squeeze", _squeeze_ref, [
    Case(((1, 3, 1),), {}), Case(((1, 3, 1),), {"axes": 0}), Case(((1, 3, 1),), {"axes": -1}),
    Case(((1, 3, 1),), {"axes": (0, 2)}), Case(((1, 1),), {}), Case(((3,),), {}), Case(((0, 1),), {"axes": 1})],
    static_shape=True)
# squeeze without axes on None dims cannot know which dims are 1: only the static variant
ROWS[-1].none_variant = False
shape_row("squeeze_axes_none_dims", "squeeze", _squeeze_ref, [Case(((1, 3, 1),), {"axes": (0, 2)}),
                                                               Case(((2, 1),), {"axes": 1})])
shape_row("broadcast_to", "broadcast_to", lambda x, shape: np.broadcast_to(x, shape), [
    Case(((3,),), {"shape": (2, 3)}), Case(((2, 1),), {"shape": (2, 4)}), Case(((),), {"shape": (2, 2)}),
    Case(((1, 3),), {"shape": (4, 2, 3)}), Case(((3,),), {"shape": (0, 3)}), Case(((2, 3),), {"shape": (2, 3)})])


def _slice_ref(x, axis, start, length):
    idx = [slice(None)] * x.ndim
    start = start + x.shape[axis] if start < 0 else start
    idx[axis] = slice(start, start + length)
    return x[tuple(idx)]


shape_row("slice", "slice", _slice_ref, [
    Case(((5, 4),), {"axis": 0, "start": 1, "length": 3}), Case(((5, 4),), {"axis": 1, "start": 0, "length": 4}),
    Case(((5, 4),), {"axis": -1, "start": 2, "length": 1}), Case(((5, 4),), {"axis": 0, "start": 2, "length": 0}),
    Case(((2, 3, 4),), {"axis": 2, "start": 3, "length": 1})])


def _strided_slice_ref(x, starts, ends, strides, start_mask=0, end_mask=0, squeeze_mask=0):
    idx = []
    for i in range(x.ndim):
        if i >= len(starts):
            idx.append(slice(None))
            continue
        if squeeze_mask >> i & 1:
            idx.append(starts[i])
            continue
        s = None if start_mask >> i & 1 else starts[i]
        e = None if end_mask >> i & 1 else ends[i]
        idx.append(slice(s, e, strides[i]))
    return x[tuple(idx)]


shape_row("strided_slice", "strided_slice", _strided_slice_ref, [
    Case(((6, 5),), {"starts": (1, 0), "ends": (5, 5), "strides": (2, 1)}),
    Case(((6, 5),), {"starts": (0, 1), "ends": (6, 4), "strides": (1, 1)}),
    Case(((6, 5),), {"starts": (5, 4), "ends": (0, 0), "strides": (-1, -2)}, label="negative strides"),
    Case(((6, 5),), {"starts": (-3, 0), "ends": (-1, 5), "strides": (1, 2)}, label="negative indices"),
    Case(((6, 5),), {"starts": (0, 0), "ends": (3, 2), "strides": (1, 1), "start_mask": 1, "end_mask": 2}, label="masks"),
    Case(((6, 5),), {"starts": (5, 0), "ends": (0, 0), "strides": (-1, 1), "start_mask": 1, "end_mask": 3},
         label="masks with negative stride"),
    Case(((6, 5),), {"starts": (2, 0), "ends": (3, 5), "strides": (1, 1), "squeeze_mask": 1}, label="squeeze"),
    Case(((2, 3, 4),), {"starts": (1, 0, 3), "ends": (2, 3, 4), "strides": (1, 1, 1), "squeeze_mask": 5}),
    Case(((6, 5),), {"starts": (3, 0), "ends": (3, 5), "strides": (1, 1)}, label="empty"),
    Case(((6, 5),), {"starts": (0, 0), "ends": (6, 5), "strides": (4, 3)})])


def _list_pack(ts):
    return (list(ts),)


shape_row("concat", "concat", lambda xs, axis=0: np.concatenate(xs, axis=axis), [
    Case(((2, 3), (4, 3)), {"axis": 0}), Case(((2, 3), (2, 1), (2, 2)), {"axis": 1}), Case(((2, 3), (2, 3)), {"axis": -1}),
    Case(((2, 3),), {"axis": 0}, label="one input"), Case(((0, 3), (2, 3)), {"axis": 0}),
    Case(((2, 0), (2, 3)), {"axis": 1}), Case(((3,), (4,)), {"axis": 0})], pack=_list_pack)


def _split_ref(x, num_splits=None, split_sizes=None, axis=0):
    if split_sizes is not None:
        return tuple(np.split(x, np.cumsum(split_sizes)[:-1], axis=axis))
    return tuple(np.split(x, num_splits, axis=axis))


shape_row("split", "split", _split_ref, [
    Case(((6, 4),), {"num_splits": 3, "axis": 0}), Case(((6, 4),), {"num_splits": 2, "axis": 1}),
    Case(((6, 4),), {"num_splits": 1, "axis": 0}), Case(((6, 4),), {"split_sizes": (1, 2, 3), "axis": 0}),
    Case(((6, 4),), {"split_sizes": [4], "axis": -1}), Case(((6, 4),), {"split_sizes": (0, 4), "axis": 1}),
    Case(((2, 6, 1),), {"num_splits": 3, "axis": -2})])
shape_row("stack", "stack", lambda xs, axis=0: np.stack(xs, axis=axis), [
    Case(((2, 3), (2, 3)), {"axis": 0}), Case(((2, 3), (2, 3), (2, 3)), {"axis": 1}), Case(((2, 3), (2, 3)), {"axis": -1}),
    Case(((), ()), {"axis": 0}), Case(((0, 2), (0, 2)), {"axis": 1}), Case(((3,),), {"axis": 0})], pack=_list_pack)


def _pad_ref(x, left_padding, right_padding, mode="constant", constant_value=0.0):
    pads = list(zip(left_padding, right_padding))
    if mode == "constant":
        return np.pad(x, pads, mode="constant", constant_values=np.asarray(constant_value).astype(x.dtype))
    return np.pad(x, pads, mode={"reflect": "reflect", "symmetric": "symmetric", "edge": "edge",
                                 "clamp_to_edge": "edge"}[mode])


shape_row("pad", "pad", _pad_ref, [
    Case(((2, 3),), {"left_padding": (1, 0), "right_padding": (0, 2)}),
    Case(((2, 3),), {"left_padding": (1, 2), "right_padding": (2, 1), "constant_value": 1.0}),
    Case(((3,),), {"left_padding": (0,), "right_padding": (0,)}), Case(((0, 2),), {"left_padding": (1, 1), "right_padding": (0, 0)}),
    Case(((2, 3, 2),), {"left_padding": (0, 1, 0), "right_padding": (1, 0, 2), "mode": "constant", "constant_value": 3.0})])
shape_row("tile", "tile", lambda x, multiples: np.tile(x, multiples), [
    Case(((2, 3),), {"multiples": (2, 1)}), Case(((2, 3),), {"multiples": (1, 3)}), Case(((2, 3),), {"multiples": (2, 2)}),
    Case(((3,),), {"multiples": (0,)}), Case(((0, 2),), {"multiples": (3, 2)}), Case(((2, 1, 2),), {"multiples": (1, 4, 1)})])
shape_row("reverse", "reverse", lambda x, axes=None: np.flip(x, _axes(axes)), [
    Case(((4, 3),), {"axes": 0}), Case(((4, 3),), {"axes": (0, 1)}), Case(((4, 3),), {"axes": -1}),
    Case(((2, 3, 4),), {"axes": (0, 2)}), Case(((0, 3),), {"axes": 1}), Case(((5,),), {"axes": [0]})])


def _flatten_2d_ref(x, axis):
    axis = axis + x.ndim if axis < 0 else axis
    return x.reshape(int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:])))


shape_row("flatten_2d", "flatten_2d", _flatten_2d_ref, [
    Case(((2, 3, 4),), {"axis": 1}), Case(((2, 3, 4),), {"axis": 2}), Case(((2, 3, 4),), {"axis": 0}),
    Case(((2, 3, 4),), {"axis": 3}), Case(((2, 3, 4),), {"axis": -1}), Case(((0, 3),), {"axis": 1})])
shape_row("swap_axes", "swap_axes", lambda x, axis1, axis2: np.swapaxes(x, axis1, axis2), [
    Case(((2, 3, 4),), {"axis1": 0, "axis2": 2}), Case(((2, 3),), {"axis1": -1, "axis2": 0}),
    Case(((2, 3),), {"axis1": 1, "axis2": 1})])
for _alias, _ref, _attrs in [("permute", lambda x, permutation: np.transpose(x, permutation), {"permutation": (1, 0)}),
                             ("flip", lambda x, axes: np.flip(x, _axes(axes)), {"axes": 0}),
                             ("broadcast", lambda x, shape: np.broadcast_to(x, shape), {"shape": (3, 2, 3)}),
                             ("ravel", lambda x: x.reshape(-1), {}), ("swapaxes", lambda x, axis1, axis2:
                                                                       np.swapaxes(x, axis1, axis2),
                                                                       {"axis1": 0, "axis2": 1})]:
    shape_row("alias_" + _alias, _alias, _ref, [Case(((2, 3),), _attrs)], dtypes=("float32", "bool"))
shape_row("alias_concatenate", "concatenate", lambda xs, axis=0: np.concatenate(xs, axis=axis),
          [Case(((2, 3), (1, 3)), {"axis": 0})], dtypes=("int16",), pack=_list_pack)
shape_row("broadcast_to_keep_dim", "broadcast_to", lambda x, shape: np.broadcast_to(
    x, tuple(d if d not in (-1, None) else x.shape[i - (len(shape) - x.ndim)] for i, d in enumerate(shape))),
    [Case(((2, 1),), {"shape": (3, -1, 4)}), Case(((2, 1),), {"shape": (None, 5)})])
shape_row("flatten", "flatten", lambda x: x.reshape(-1), [Case(((2, 3, 4),)), Case(((),)), Case(((0, 3),)), Case(((5,),))])
shape_row("shape_of", "shape_of", lambda x: np.array(x.shape, dtype=np.int32), [
    Case(((2, 3, 4),)), Case(((),)), Case(((0, 3),))], out_dtype="int32")


# numpy indexing: one case per index expression
def _index_op(g, x, index):
    return x[index]


def _index_ref(x, index):
    return x[index]


_E = Ellipsis
_INDEX = [
    1, -1, (0, 2), (slice(1, 3),), slice(None, None, 2), slice(None, None, -1), slice(5, 1, -2), slice(-2, None),
    (slice(None), 1), (_E, 2), (None,), (slice(None), None, slice(1, 3)), (1, _E, slice(None, None, -2)),
    (slice(-2, None), slice(1, -1), slice(None, None, 3)), (None, 0, None), (_E,), (_E, None), (2, -1, 0),
    (slice(None, None, -1), slice(None, None, -1)), (slice(10, 20),), (slice(-10, 2),), (slice(1, 1),),
    (slice(None), slice(None), slice(4, 0, -1)), (0, slice(None, None, 2), _E),
]
shape_row("getitem", _index_op, _index_ref, [Case(((3, 4, 5),), {"index": ix}, label=f"x[{ix!r}]") for ix in _INDEX]
          + [Case(((0, 4),), {"index": (slice(None), 1)}), Case(((6,),), {"index": slice(None, None, -4)})])


# ----------------------------------------------------------------------------------------
# creation (helper "red")


def _create_row(name, ref, cases, dtypes=ALL, **kw):
    return row(name, name, ref, dtypes, cases, dtype_attr="dtype", none_variant=False, **kw)


_create_row("zeros", lambda shape, dtype: np.zeros(shape, np_dtype(dtype)),
            [Case((), {"shape": (2, 3)}), Case((), {"shape": ()}), Case((), {"shape": (0, 4)})])
_create_row("ones", lambda shape, dtype: np.ones(shape, np_dtype(dtype)),
            [Case((), {"shape": (2, 3)}), Case((), {"shape": ()}), Case((), {"shape": (3, 0)})])
_create_row("full", lambda shape, value, dtype: np.full(shape, value, np_dtype(dtype)),
            [Case((), {"shape": (2, 3), "value": 1}), Case((), {"shape": (), "value": 0}),
             Case((), {"shape": (4,), "value": 7}, dtypes=NUMERIC), Case((), {"shape": (2,), "value": 2.5}, dtypes=FLOATS),
             Case((), {"shape": (2,), "value": -3}, dtypes=SINTS + FLOATS), Case((), {"shape": (0, 2), "value": 1})])
def _arange_ref(start, stop=None, step=1, dtype="float32"):
    if stop is None:
        start, stop = 0, start
    # documented: values computed in float64, then converted (integers truncate toward zero)
    n = max(0, int(math.ceil((stop - start) / step)))
    return (start + np.arange(n, dtype=np.float64) * step).astype(np_dtype(dtype))


_create_row("arange", _arange_ref,
            [Case((), {"start": 5}, label="arange(n)"), Case((), {"start": 0, "stop": 5, "step": 1}),
             Case((), {"start": 1.5, "stop": 7, "step": 1.5}, dtypes=INTS, label="fractional values truncate"), Case((), {"start": 2, "stop": 20, "step": 3}),
             Case((), {"start": 5, "stop": 0, "step": 1}, label="empty"),
             Case((), {"start": 10, "stop": -5, "step": -2}, dtypes=SINTS + FLOATS),
             Case((), {"start": 0.5, "stop": 3.0, "step": 0.25}, dtypes=FLOATS),
             Case((), {"start": 0, "stop": 1, "step": 0.1}, dtypes=("float32", "float64"))],
            NUMERIC)


def _full_saturating_ref(shape, value, dtype):
    info = _iinfo(dtype)
    v = 0 if math.isnan(value) else min(max(math.trunc(value) if math.isfinite(value) else value, info.min), info.max)
    return np.full(shape, int(v), np_dtype(dtype))


row("full_saturating", "full", _full_saturating_ref, INTS,
    [Case((), {"shape": (2,), "value": 2.7}), Case((), {"shape": (2,), "value": -2.7}),
     Case((), {"shape": (1,), "value": 1e30}), Case((), {"shape": (1,), "value": -1e30}),
     Case((), {"shape": (1,), "value": float("nan")}), Case((), {"shape": (1,), "value": 300.0})],
    dtype_attr="dtype", none_variant=False)
_create_row("eye", lambda n, m=None, k=0, dtype="float32": np.eye(n, m, k, dtype=np_dtype(dtype)),
            [Case((), {"n": 3}), Case((), {"n": 3, "m": 4}), Case((), {"n": 4, "m": 3, "k": 1}),
             Case((), {"n": 3, "k": -1}), Case((), {"n": 0}), Case((), {"n": 2, "m": 3, "k": 5})])


# ----------------------------------------------------------------------------------------
# erfinv (the activations, losses and the other NN families are in conformance_nn.py)

try:
    from scipy.special import erfinv as _erfinv
except ImportError:  # pragma: no cover
    def _erfinv(y):
        y = np.asarray(y, np.float64)
        x = np.zeros_like(y)
        for _ in range(60):  # Newton on math.erf
            x = x - (np.vectorize(math.erf)(x) - y) / (2 / math.sqrt(math.pi) * np.exp(-x * x))
        return np.where(np.abs(y) == 1, np.sign(y) * np.inf, np.where(np.abs(y) > 1, np.nan, x))

_COMPOSITE_TOL = {"float16": (8e-3, 1e-3), "bfloat16": (5e-2, 1e-2), "float32": (2e-5, 1e-6), "float64": (1e-12, 1e-14)}
# erfinv is documented as "about 1e-7 relative" (a single-precision approximation), float64 included
unary("erfinv", _erfinv, domain=dom(lo=-0.99, hi=0.99),
      tol=dict(_COMPOSITE_TOL, float32=(2e-6, 1e-7), float64=(2e-7, 1e-8)), special=False,
      extra=[Case(values=([-1.0, 1.0, 0.0, -0.0, 1.5, -2.0, _NAN, 0.5, -0.999],), dtypes=FLOATS, label="special")])

# ----------------------------------------------------------------------------------------
# correctly rounded ops: IEEE +, -, *, /, sqrt, rounding, comparisons, data movement and
# conversions give exactly the float64 reference rounded to the output dtype (halves computed
# in float32 round innocuously: 24 >= 2*11+2 bits). Their float results are compared exactly.

_EXACT_OPS = {
    "identity", "negative", "absolute", "sign", "floor", "ceil", "round", "truncate", "square", "square_root",
    "reciprocal", "relu", "addition", "subtraction", "multiplication", "division", "floor_division", "modulo",
    "maximum", "minimum", "select", "where", "clamp", "clip", "cast", "reduction_maximum", "reduction_minimum",
    "neg", "abs", "rint", "trunc", "sqrt", "add", "subtract", "multiply", "divide", "floor_divide", "mod",
    "reshape", "transpose", "expand_dims", "squeeze", "broadcast_to", "slice", "strided_slice", "concat", "split",
    "stack", "pad", "tile", "reverse", "flatten_2d", "flatten", "shape_of", "swap_axes", "permute", "flip",
    "broadcast", "ravel", "swapaxes", "concatenate", "zeros", "ones", "full", "eye", "arange", "max", "min",
}
_EXACT_NAMES = {
    "op_add", "op_sub", "op_mul", "op_truediv", "op_floordiv", "op_mod", "op_neg", "op_abs", "op_pos",
    "scalar_add_int", "scalar_radd_int", "scalar_rsub_int", "scalar_mul_int", "scalar_rmul_int", "scalar_truediv_int",
    "scalar_rtruediv", "scalar_floordiv", "scalar_mod", "scalar_add_float", "scalar_mul_float",
    "scalar_mul_0.1_float32", "scalar_float_integral_into_int", "scalar_numpy_scalar", "scalar_select", "tensor_T",
    "getitem", "astype_method",
}
for _r in ROWS:
    if (isinstance(_r.op, str) and _r.op in _EXACT_OPS) or _r.name in _EXACT_NAMES:
        _r.exact = True

# ----------------------------------------------------------------------------------------
# what the table must cover (issue 2): test_conformance asserts each is a row's op

REQUIRED_OPS = """
identity negative absolute sign floor ceil round truncate exponent exponent_base2 exponent_base10 logarithm
logarithm_base2 logarithm_base10 square square_root reverse_square_root reciprocal sin cos tan sinh cosh tanh asin
acos atan asinh acosh atanh erf sigmoid relu logical_not isnan isinf isfinite bitwise_not cast
addition subtraction multiplication division floor_division modulo power maximum minimum atan2 equal not_equal
less_than less_than_or_equal_to greater_than greater_than_or_equal_to logical_and logical_or logical_xor bitwise_and
bitwise_or bitwise_xor bitwise_left_shift bitwise_right_shift select clamp
reduction_sum reduction_product reduction_maximum reduction_minimum mean variance reduction_and reduction_or logsumexp
reduction_arg_maximum reduction_arg_minimum sum prod max min var all any argmax argmin
matrix_multiplication matmul
reshape transpose expand_dims squeeze broadcast_to slice strided_slice concat split stack pad tile reverse flatten_2d
flatten shape_of
zeros ones full arange eye
""".split()


def covered_ops():
    return {r.op for r in ROWS if isinstance(r.op, str)} | {c for r in ROWS for c in r.covers}


# ----------------------------------------------------------------------------------------
# pad modes, pad_gradient, space/depth, band_part, one_hot (issue 4; appended after the
# exactness marks, so data-movement rows say exact=True themselves). Values against numpy
# (and PyTorch's F.pad, pixel_(un)shuffle, tril/triu, one_hot), gradients by finite differences.

_PAD_NP_MODE = {"clamp_to_edge": "edge", "periodic": "wrap", "circular": "wrap"}


def _pad_mode_ref(x, left_padding, right_padding, mode):
    pads = list(zip(left_padding, right_padding))
    return np.pad(x, pads, mode=_PAD_NP_MODE.get(mode, mode))


# (shape, left, right); each mode takes those its limits allow (reflect: < dim; symmetric and
# wrap: <= dim; edge: a non-empty dim)
_PAD_CASES = [
    ((5,), (2,), (3,)), ((5,), (0,), (4,)), ((4,), (3,), (0,)), ((3, 4), (1, 2), (2, 3)), ((3, 4), (0, 3), (2, 0)),
    ((2, 3, 4), (1, 0, 2), (1, 2, 3)), ((2, 3, 4), (0, 0, 0), (0, 0, 0)), ((1, 2, 3, 5), (0, 1, 2, 4), (0, 1, 1, 3)),
    ((6, 70), (5, 40), (4, 69)), ((2, 1), (0, 1), (0, 0)), ((0, 3), (0, 2), (0, 1)), ((3, 0), (2, 0), (1, 0)),
]
_PAD_LIMIT = {"reflect": lambda n: n - 1, "symmetric": lambda n: n, "wrap": lambda n: n,
              "edge": lambda n: 10 ** 9 if n else 0, "constant": lambda n: 10 ** 9}


def _pad_fits(shape, left, right, mode):
    return all(l <= _PAD_LIMIT[mode](n) and r <= _PAD_LIMIT[mode](n) for n, l, r in zip(shape, left, right))


_PAD_MODES = ("reflect", "symmetric", "edge", "wrap")
shape_row("pad_modes", "pad", _pad_mode_ref, [
    Case((sh,), {"left_padding": l, "right_padding": r, "mode": m}) for m in _PAD_MODES for sh, l, r in _PAD_CASES
    if _pad_fits(sh, l, r, m)] + [
    Case(((2, 1, 3),), {"left_padding": (0, 2, 1), "right_padding": (1, 3, 2), "mode": "clamp_to_edge"}, label="alias"),
    Case(((5, 33),), {"left_padding": (2, 32), "right_padding": (4, 30), "mode": "periodic"}, label="alias"),
    Case(((3, 4),), {"left_padding": (1, 2), "right_padding": (2, 1), "mode": "circular"}, label="alias")] + [
    Case(((3, 4),), {"left_padding": (2, 1), "right_padding": (1, 3), "mode": m}, label="fd " + m)
    for m in _PAD_MODES], exact=True,
    grad=Grad(cases=tuple("fd " + m for m in _PAD_MODES), second_order=True,
              unknown_dims=tuple("fd " + m for m in _PAD_MODES)))


def _t_pad(x, left_padding, right_padding, mode):
    """F.pad pads trailing dims (last first): reflect, replicate (edge), circular (wrap)."""
    k = max([i + 1 for i in range(x.ndim) if left_padding[x.ndim - 1 - i] or right_padding[x.ndim - 1 - i]] or [1])
    arg = [p for i in reversed(range(x.ndim - k, x.ndim)) for p in (left_padding[i], right_padding[i])]
    tmode = {"reflect": "reflect", "edge": "replicate", "wrap": "circular"}[mode]
    return torch_module().nn.functional.pad(x, arg, mode=tmode)


row("pad_modes_vs_torch", "pad", TorchRef(_t_pad), FLOATS,
    [Case(((2, 3, 5, 6),), {"left_padding": (0, 0, 2, 3), "right_padding": (0, 0, 4, 1), "mode": m})
     for m in ("reflect", "edge", "wrap")]
    + [Case(((2, 2, 5, 4),), {"left_padding": (0, 0, 3, 2), "right_padding": (0, 0, 4, 3), "mode": m})
       for m in ("edge", "wrap")], exact=True, grad=Grad(cases=()))


def _pad_gradient_ref(dy, like, left_padding, right_padding, mode):
    """numpy pads the element numbers, then dy is summed per source element."""
    n = like.size
    kw = {"constant_values": n} if mode == "constant" else {}  # constant padding reads the sentinel n
    src = np.pad(np.arange(n).reshape(like.shape), list(zip(left_padding, right_padding)), mode=mode, **kw)
    return np.bincount(src.ravel(), weights=dy.ravel().astype(np.float64), minlength=n + 1)[:n].reshape(like.shape)


def _padded(shape, left, right):
    return tuple(n + l + r for n, l, r in zip(shape, left, right))


row("pad_gradient", "pad_gradient", _pad_gradient_ref, NUMERIC, [
    Case((_padded(sh, l, r), sh), {"left_padding": l, "right_padding": r, "mode": m})
    for m in _PAD_MODES + ("constant",) for sh, l, r in _PAD_CASES if _pad_fits(sh, l, r, m)] + [
    Case(((6, 8), (3, 4)), {"left_padding": (2, 1), "right_padding": (1, 3), "mode": m}, label="fd " + m)
    for m in _PAD_MODES + ("constant",)],
    doms=dom(ilo=-10, ihi=10), grad=Grad(cases=tuple("fd " + m for m in _PAD_MODES + ("constant",)),
                                         second_order=True, wrt=(0,)))  # like gives only the shape


def _space_to_depth_ref(x, block_size, data_layout="NHWC", use_pixel_shuffle_order=True):
    b = block_size
    if data_layout == "NCHW":
        x = x.transpose(0, 2, 3, 1)
    n, h, w, c = x.shape
    t = x.reshape(n, h // b, b, w // b, b, c)  # (n, h, i, w, j, c)
    t = t.transpose(0, 1, 3, 5, 2, 4) if use_pixel_shuffle_order else t.transpose(0, 1, 3, 2, 4, 5)
    y = t.reshape(n, h // b, w // b, c * b * b)
    return y.transpose(0, 3, 1, 2) if data_layout == "NCHW" else y


def _depth_to_space_ref(x, block_size, data_layout="NHWC", use_pixel_shuffle_order=True):
    b = block_size
    if data_layout == "NCHW":
        x = x.transpose(0, 2, 3, 1)
    n, h, w, cd = x.shape
    c = cd // (b * b)
    if use_pixel_shuffle_order:
        t = x.reshape(n, h, w, c, b, b).transpose(0, 1, 4, 2, 5, 3)  # (n, h, i, w, j, c)
    else:
        t = x.reshape(n, h, w, b, b, c).transpose(0, 1, 3, 2, 4, 5)
    y = t.reshape(n, h * b, w * b, c)
    return y.transpose(0, 3, 1, 2) if data_layout == "NCHW" else y


# (NHWC shape, block): both layouts and both channel orders of each
_SD_SHAPES = [((2, 4, 6, 3), 2), ((1, 6, 3, 2), 3), ((2, 2, 2, 5), 1), ((1, 8, 4, 1), 4), ((0, 4, 4, 2), 2),
              ((2, 0, 4, 3), 2), ((3, 64, 32, 2), 2)]


def _sd_cases(to_depth):
    cases = []
    for sh, b in _SD_SHAPES:
        if not to_depth:  # the space_to_depth result's shape
            sh = (sh[0], sh[1] // b, sh[2] // b, sh[3] * b * b)
        for lay in ("NHWC", "NCHW"):
            for ps in (True, False):
                cases.append(Case(((sh[0], sh[3], sh[1], sh[2]) if lay == "NCHW" else sh,),
                                  {"block_size": b, "data_layout": lay, "use_pixel_shuffle_order": ps}))
    fd = [((1, 4, 2, 3), {}), ((1, 4, 2, 3), {"use_pixel_shuffle_order": False}),
          ((1, 2, 3, 6), {"block_size": 3, "data_layout": "NCHW"})] if to_depth else \
        [((2, 8, 1, 2), {"data_layout": "NCHW"}), ((2, 8, 1, 2), {"data_layout": "NCHW", "use_pixel_shuffle_order": False})]
    return cases + [Case((sh,), dict({"block_size": 2}, **a), label=f"fd {i}") for i, (sh, a) in enumerate(fd)]


shape_row("space_to_depth_2d", "space_to_depth_2d", _space_to_depth_ref, _sd_cases(True), exact=True,
          grad=Grad(cases=("fd 0", "fd 1", "fd 2"), second_order=("fd 0", "fd 1"), unknown_dims=("fd 2",)))
shape_row("depth_to_space_2d", "depth_to_space_2d", _depth_to_space_ref, _sd_cases(False), exact=True,
          grad=Grad(cases=("fd 0", "fd 1"), second_order=True))
# NCHW with the pixel-shuffle order is PyTorch's pixel_unshuffle / pixel_shuffle
row("space_to_depth_2d_vs_torch", "space_to_depth_2d",
    TorchRef(lambda x, block_size, data_layout: torch_module().nn.functional.pixel_unshuffle(x, block_size)), FLOATS,
    [Case(((2, 3, 6, 4),), {"block_size": 2, "data_layout": "NCHW"}),
     Case(((1, 2, 9, 3),), {"block_size": 3, "data_layout": "NCHW"})], exact=True, grad=Grad(cases=()))
row("depth_to_space_2d_vs_torch", "depth_to_space_2d",
    TorchRef(lambda x, block_size, data_layout: torch_module().nn.functional.pixel_shuffle(x, block_size)), FLOATS,
    [Case(((2, 18, 2, 3),), {"block_size": 3, "data_layout": "NCHW"}),
     Case(((1, 8, 3, 1),), {"block_size": 2, "data_layout": "NCHW"})], exact=True, grad=Grad(cases=()))


def _band_part_ref(x, num_lower, num_upper):
    m, n = x.shape[-2:]
    i, j = np.arange(m)[:, None], np.arange(n)[None, :]
    keep = ((num_lower < 0) | (i - j <= num_lower)) & ((num_upper < 0) | (j - i <= num_upper))
    return np.where(keep, x, np.zeros((), x.dtype))


_BAND_ATTRS = [(-1, -1), (0, 0), (-1, 0), (0, -1), (1, 2), (2, 1), (3, 0), (0, 10), (100, 100), (1 << 62, -5)]
shape_row("band_part", "band_part", _band_part_ref, [
    Case((sh,), {"num_lower": lo, "num_upper": up}) for sh in [(4, 4), (3, 5), (6, 2), (2, 3, 4, 5), (1, 1)]
    for lo, up in _BAND_ATTRS] + [
    Case((sh,), {"num_lower": lo, "num_upper": up}, label="zero-size") for sh in [(0, 3), (2, 0, 4), (3, 4, 0)]
    for lo, up in _BAND_ATTRS[:3]] + [
    Case(((40, 1100),), {"num_lower": 50, "num_upper": 3}), Case(((2, 300, 200),), {"num_lower": 5, "num_upper": -1}),
    Case(values=(np.full((3, 3), np.nan),), attrs={"num_lower": 0, "num_upper": 0}, dtypes=FLOATS, label="nan"),
    Case(((2, 3, 4),), {"num_lower": 1, "num_upper": 0}, label="fd"),
    Case(((4, 3),), {"num_lower": -1, "num_upper": 1}, label="fd 2")], exact=True,
    grad=Grad(cases=("fd", "fd 2"), second_order=("fd",), unknown_dims=("fd 2",)))
shape_row("alias_matrix_band_part", "matrix_band_part", _band_part_ref,
          [Case(((3, 4),), {"num_lower": 1, "num_upper": 0})], dtypes=("float32", "bool"), exact=True)


def _t_band(x, num_lower, num_upper):
    """tril / triu (a negative bound keeps that whole triangle)."""
    torch = torch_module()
    y = x if num_lower < 0 else torch.triu(x, -num_lower)
    return y if num_upper < 0 else torch.tril(y, num_upper)


row("band_part_vs_torch", "band_part", TorchRef(_t_band), FLOATS,
    [Case(((2, 5, 7),), {"num_lower": lo, "num_upper": up}) for lo, up in [(-1, 0), (0, -1), (1, -1), (-1, 2), (2, 1)]],
    exact=True, grad=Grad(cases=()))


def _one_hot_ref(indices, depth, axis=-1, dtype="float32", on_value=1.0, off_value=0.0):
    idx = indices.astype(np.float64)  # exact for the drawn values; keeps uint64 and negatives apart
    hot = idx[..., None] == np.arange(depth)  # out of range (negative included): all off
    hot = np.moveaxis(hot, -1, axis if axis >= 0 else hot.ndim + axis)
    return np.where(hot, on_value, off_value)


_ONE_HOT_CASES = [
    Case(((2, 3),), {"depth": 4}), Case(((2, 3),), {"depth": 5, "axis": 0}), Case(((2, 3),), {"depth": 3, "axis": 1}),
    Case(((),), {"depth": 6}, label="rank-0"), Case(((0, 2),), {"depth": 3}, label="zero-size"),
    Case(((3,),), {"depth": 0}, label="depth 0"), Case(((40000,),), {"depth": 3}, label="parallel")] + [
    Case(((3, 4),), {"depth": 5, "axis": ax}) for ax in (-1, 0, 1, 2, -2, -3)] + [
    Case(values=(lambda d: np.array([np.iinfo(np_dtype(d)).max, 1, np.iinfo(np_dtype(d)).min, 2], np_dtype(d)),),
         attrs={"depth": 3}, label="dtype extremes")]
# indices of every integer dtype (values -2..6: negative and >= depth are out of range), float32 result
row("one_hot", "one_hot", _one_hot_ref, INTS, _ONE_HOT_CASES, doms=dom(ilo=-2, ihi=6), out_dtype="float32",
    exact=True)
# every result dtype (int32 indices), with on/off values where the dtype holds them
row("one_hot_dtypes", "one_hot", _one_hot_ref, ALL, [
    Case(((2, 3),), {"depth": 4}), Case(((4,),), {"depth": 3, "axis": 0}),
    Case(((2, 3),), {"depth": 4, "axis": -2, "on_value": 5.0, "off_value": -3.0}, dtypes=FLOATS + SINTS),
    Case(((2, 3),), {"depth": 4, "on_value": 7.0, "off_value": 2.0}, dtypes=UINTS)],
    doms=dom(ilo=-2, ihi=6), input_dtypes=lambda d: ("int32",), dtype_attr="dtype", exact=True)
row("one_hot_vs_torch", "one_hot",
    TorchRef(lambda i, depth, dtype: torch_module().nn.functional.one_hot(i, depth)), ("int64",),
    [Case(((2, 3, 4),), {"depth": 6, "dtype": "int64"}), Case(((5,),), {"depth": 5, "dtype": "int64"})],
    doms=dom(ilo=0, ihi=4), exact=True)


# ----------------------------------------------------------------------------------------
# the NN families (convolution, pooling, resize, normalisation, activations, softmax and
# losses, optimizer updates, random numbers) append their rows from conformance_nn.py

import conformance_nn  # noqa: E402,F401

import conformance_control_flow  # noqa: E402,F401
# the sparse family (sparse_tensor, sparse_matmul and their gradient ops) appends its rows from conformance_sparse.py
import conformance_sparse  # noqa: E402,F401
import conformance_dynamic  # noqa: E402,F401
import conformance_gather  # noqa: E402,F401
import conformance_sort  # noqa: E402,F401
import conformance_fft  # noqa: E402,F401
import conformance_attention  # noqa: E402,F401
import conformance_rnn  # noqa: E402,F401
import conformance_linalg  # noqa: E402,F401
import conformance_quantization  # noqa: E402,F401
import conformance_image  # noqa: E402,F401
import conformance_cuops  # noqa: E402,F401
