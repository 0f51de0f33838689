"""The ONNX operator table: one handler per op type of the default domain.

A handler is handler(cx, node, ins, attrs) -> output value or list of them. `ins` holds the
node's inputs (numpy arrays for values known at import time, Sym shape values, Tensors; None
for an omitted optional input); cx (a _model.Context) has the graph (cx.g), the model's opset
(cx.opset) and helpers: cx.t(v) a Tensor, cx.c(v) / cx.ints(v) an import-time constant,
cx.shape / cx.dtype / cx.rank, cx.fail / cx.unsupported to raise naming the node.

Swapping in a native op later is one line: replace the entry in HANDLERS."""
import numpy as np

from .. import _dtypes
from ._model import Sym, DimRef, Prod, as_prod, simplify, mg_dtype, np_dtype, _contig

HANDLERS = {}
FOLD = set()  # op types computed at import time when every input is known then
UNSUPPORTED = {}  # op type -> why (ops of the default domain the importer lists as unsupported)


def op(*names, fold=True):
    def deco(fn):
        for n in names:
            HANDLERS[n] = fn
            if fold:
                FOLD.add(n)
        return fn
    return deco


def _is_float(dt):
    return _dtypes.as_dtype(dt).name in ("float16", "bfloat16", "float32", "float64")


# ---------------------------------------------------------------- elementwise

_UNARY = {
    "Abs": "absolute", "Acos": "acos", "Acosh": "acosh", "Asin": "asin", "Asinh": "asinh", "Atan": "atan",
    "Atanh": "atanh", "Ceil": "ceil", "Cos": "cos", "Cosh": "cosh", "Erf": "erf", "Exp": "exponent",
    "Floor": "floor", "Log": "logarithm", "Neg": "negative", "Not": "logical_not", "Reciprocal": "reciprocal",
    "Round": "round", "Sigmoid": "sigmoid", "Sign": "sign", "Sin": "sin", "Sinh": "sinh", "Sqrt": "square_root",
    "Tan": "tan", "Tanh": "tanh", "IsNaN": "isnan", "Relu": "relu", "Softsign": "softsign",
    "BitwiseNot": "bitwise_not", "Mish": "mish", "HardSwish": "hard_swish",
}


def _unary(method):
    def h(cx, node, ins, a):
        return getattr(cx.g, method)(cx.t(ins[0]))
    return h


for _k, _m in _UNARY.items():
    op(_k)(_unary(_m))


@op("Identity")
def _identity(cx, node, ins, a):
    v = ins[0]
    return v if not hasattr(v, "graph") else cx.g.identity(v)


@op("Softplus")
def _softplus(cx, node, ins, a):
    return cx.g.softplus(cx.t(ins[0]))


@op("IsInf")
def _isinf(cx, node, ins, a):
    x = cx.t(ins[0])
    pos, neg = a.get("detect_positive", 1), a.get("detect_negative", 1)
    if pos and neg:
        return cx.g.isinf(x)
    inf = cx.g.isinf(x)
    if not pos and not neg:
        return cx.g.logical_and(inf, cx.g.logical_not(inf))
    sign = cx.g.greater_than(x, 0) if pos else cx.g.less_than(x, 0)
    return cx.g.logical_and(inf, sign)


@op("Elu")
def _elu(cx, node, ins, a):
    return cx.g.elu(cx.t(ins[0]), alpha=float(a.get("alpha", 1.0)))


@op("Selu")
def _selu(cx, node, ins, a):
    x = cx.t(ins[0])
    alpha, gamma = float(a.get("alpha", 1.67326319217681884765625)), float(a.get("gamma", 1.05070102214813232421875))
    g = cx.g
    return g.select(g.greater_than(x, 0), x * gamma, (g.exponent(x) - 1.0) * (alpha * gamma))


@op("LeakyRelu")
def _leaky(cx, node, ins, a):
    return cx.g.leaky_relu(cx.t(ins[0]), alpha=float(a.get("alpha", 0.01)))


@op("ThresholdedRelu")
def _trelu(cx, node, ins, a):
    x = cx.t(ins[0])
    return cx.g.select(cx.g.greater_than(x, float(a.get("alpha", 1.0))), x, x * 0.0)


def _f32(fn):
    """A composite elementwise handler computed in float32 for float16/bfloat16 inputs (one
    rounding at the end, as ONNX's reference), cast back."""
    def h(cx, node, ins, a):
        x = cx.t(ins[0])
        if x.dtype.name in ("float16", "bfloat16"):
            return cx.g.cast(fn(cx, cx.g.cast(x, "float32"), a), x.dtype)
        return fn(cx, x, a)
    return h


@op("Celu")
@_f32
def _celu(cx, x, a):
    al = float(a.get("alpha", 1.0))
    g = cx.g
    return g.maximum(x, 0.0) + g.minimum(g.exponent(x / al) - 1.0, 0.0) * al


@op("HardSigmoid")
def _hsig(cx, node, ins, a):
    x = cx.t(ins[0])
    return cx.g.clamp(x * float(a.get("alpha", 0.2)) + float(a.get("beta", 0.5)), 0.0, 1.0)


@op("Gelu")
def _gelu(cx, node, ins, a):
    return cx.g.gelu(cx.t(ins[0]), approximate=a.get("approximate", "none"))


@op("Swish")
def _swish(cx, node, ins, a):
    x = cx.t(ins[0])
    alpha = float(a.get("alpha", 1.0))
    return x * cx.g.sigmoid(x * alpha if alpha != 1.0 else x)


@op("Shrink")
def _shrink(cx, node, ins, a):
    x = cx.t(ins[0])
    g = cx.g
    lam, bias = float(a.get("lambd", 0.5)), float(a.get("bias", 0.0))
    if not _is_float(x.dtype):
        xf = g.cast(x, "float32")
        r = g.select(g.less_than(xf, -lam), xf + bias, g.select(g.greater_than(xf, lam), xf - bias, xf * 0.0))
        return g.cast(r, x.dtype)
    return g.select(g.less_than(x, -lam), x + bias, g.select(g.greater_than(x, lam), x - bias, x * 0.0))


@op("PRelu")
def _prelu(cx, node, ins, a):
    x, s = cx.t(ins[0]), cx.t(ins[1])
    return cx.g.select(cx.g.less_than(x, 0), x * s, x)


@op("Clip")
def _clip(cx, node, ins, a):
    x = cx.t(ins[0])
    lo = ins[1] if len(ins) > 1 else None
    hi = ins[2] if len(ins) > 2 else None
    if "min" in a:  # opset < 11 form, kept for models that still carry it
        lo = np.array(a["min"], np_dtype_of(x))
    if "max" in a:
        hi = np.array(a["max"], np_dtype_of(x))
    g = cx.g
    if lo is not None:
        x = g.maximum(x, cx.t(lo))
    if hi is not None:
        x = g.minimum(x, cx.t(hi))
    return x


def np_dtype_of(t):
    return _dtypes.to_numpy_dtype(t.dtype)


_BINARY = {"Add": "addition", "Sub": "subtraction", "Mul": "multiplication", "Div": "division",
           "Equal": "equal", "Greater": "greater_than", "Less": "less_than",
           "GreaterOrEqual": "greater_than_or_equal_to", "LessOrEqual": "less_than_or_equal_to",
           "And": "logical_and", "Or": "logical_or", "Xor": "logical_xor",
           "BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor"}


def _binary(method, name):
    def h(cx, node, ins, a):
        x, y = ins[0], ins[1]
        if cx.dtype(x) != cx.dtype(y):
            cx.fail(f"inputs have different dtypes ({cx.dtype(x).name} and {cx.dtype(y).name}); {name} needs "
                    f"equal ones", kind=_type_error())
        if isinstance(x, Sym) or isinstance(y, Sym):
            r = _sym_arith(cx, name, x, y)
            if r is not None:
                return r
        return getattr(cx.g, method)(cx.t(x), cx.t(y))
    return h


def _type_error():
    from ._errors import OnnxTypeError
    return OnnxTypeError


for _k, _m in _BINARY.items():
    op(_k)(_binary(_m, _k))


def _sym_arith(cx, name, x, y):
    """Elementwise arithmetic on shape values: products of run-time dims and ints stay symbolic
    (Prod); other results are computed in the graph."""
    if name not in ("Add", "Sub", "Mul", "Div"):
        return None

    def elems(v):
        if isinstance(v, Sym):
            return v.elems, v.scalar
        a = np.asarray(v)
        return [int(e) for e in a.reshape(-1)], a.ndim == 0
    xe, xs = elems(x)
    ye, ys = elems(y)
    if len(xe) != len(ye):
        if len(xe) == 1:
            xe = xe * len(ye)
        elif len(ye) == 1:
            ye = ye * len(xe)
        else:
            return None
    out = []
    for p, q in zip(xe, ye):
        r = None
        if isinstance(p, int) and isinstance(q, int):
            r = {"Add": p + q, "Sub": p - q, "Mul": p * q}.get(name, int(p / q) if q else None)
        elif name == "Mul":
            pp, qq = as_prod(p), as_prod(q)
            r = simplify(Prod(pp.coef * qq.coef, pp.dims + qq.dims))
        elif name == "Div" and isinstance(q, int) and q and as_prod(p).coef % q == 0:
            pp = as_prod(p)
            r = simplify(Prod(pp.coef // q, pp.dims))
        elif name in ("Add", "Sub") and q == 0:
            r = p
        if r is None:
            return None
        out.append(r)
    return Sym(out, scalar=xs and ys)


@op("Pow")
def _pow(cx, node, ins, a):
    x, y = cx.t(ins[0]), ins[1]
    if cx.dtype(y) != x.dtype:
        y = cx.g.cast(cx.t(y), x.dtype)
    return cx.g.power(x, cx.t(y))


@op("Mod")
def _mod(cx, node, ins, a):
    x, y = cx.t(ins[0]), cx.t(ins[1])
    g = cx.g
    if not a.get("fmod", 0):
        return g.modulo(x, y)  # the sign of the divisor (numpy's mod; ONNX's reference for floats too)
    if _is_float(x.dtype):  # C fmod: the sign of the dividend
        r = g.modulo(g.absolute(x), g.absolute(y))
        return g.select(g.less_than(x, 0), -r, r)
    return x - g.division(x, y) * y  # integer division truncates, as C


@op("BitShift")
def _bitshift(cx, node, ins, a):
    x, y = cx.t(ins[0]), cx.t(ins[1])
    d = a.get("direction", "")
    if d == "LEFT":
        return cx.g.bitwise_left_shift(x, y)
    if d == "RIGHT":
        return cx.g.bitwise_right_shift(x, y)
    cx.fail(f"direction must be 'LEFT' or 'RIGHT', got {d!r}")


def _variadic(method, mean=False):
    def h(cx, node, ins, a):
        vals = [cx.t(v) for v in ins if v is not None]
        if not vals:
            cx.fail("needs at least one input")
        r = vals[0]
        for v in vals[1:]:
            r = getattr(cx.g, method)(r, v)
        if mean:
            r = r / float(len(vals))
        elif len(vals) == 1:
            r = cx.g.identity(r)
        return r
    return h


op("Sum")(_variadic("addition"))
op("Mean")(_variadic("addition", mean=True))
op("Max")(_variadic("maximum"))
op("Min")(_variadic("minimum"))


@op("Where")
def _where(cx, node, ins, a):
    return cx.g.select(cx.t(ins[0]), cx.t(ins[1]), cx.t(ins[2]))


@op("Cast")
def _cast(cx, node, ins, a):
    to = mg_dtype(a.get("to", 0), "Cast's 'to'")
    v = ins[0]
    if isinstance(v, Sym) and to.name == "int64":
        return v
    if isinstance(v, np.ndarray):  # numpy: same truncation/saturation rules as the graph's cast
        pass
    return cx.g.cast(cx.t(v), to)


@op("CastLike")
def _castlike(cx, node, ins, a):
    return cx.g.cast(cx.t(ins[0]), cx.dtype(ins[1]))


# ---------------------------------------------------------------- constants and shapes

@op("Constant")
def _constant(cx, node, ins, a):
    from ._model import _onnx
    if "value" in a:
        t = a["value"]
        mg_dtype(t.data_type, "the Constant's value")
        arr = _onnx().numpy_helper.to_array(t)
        return _contig(np.asarray(arr).astype(np_dtype(t.data_type, "value")))
    if "value_float" in a:
        return np.array(a["value_float"], np.float32)
    if "value_floats" in a:
        return np.array(a["value_floats"], np.float32)
    if "value_int" in a:
        return np.array(a["value_int"], np.int64)
    if "value_ints" in a:
        return np.array(a["value_ints"], np.int64)
    if "sparse_value" in a:
        sp = a["sparse_value"]
        vals = _onnx().numpy_helper.to_array(sp.values)
        idx = _onnx().numpy_helper.to_array(sp.indices)
        dense = np.zeros(tuple(sp.dims), vals.dtype)
        if idx.ndim == 1:
            dense.reshape(-1)[idx] = vals
        else:
            dense[tuple(idx.T)] = vals
        return dense
    cx.unsupported(f"a Constant with {sorted(a)} (strings are not supported)")


@op("Shape")
def _shape(cx, node, ins, a):
    x = ins[0]
    shape = cx.shape(x)
    r = len(shape)
    start, end = a.get("start", 0), a.get("end", r)
    start = min(max(start + r if start < 0 else start, 0), r)
    end = min(max(end + r if end < 0 else end, 0), r)
    dims = list(range(start, end))
    if all(shape[i] is not None for i in dims):
        return np.array([shape[i] for i in dims], np.int64)
    return Sym([shape[i] if shape[i] is not None else DimRef(x, i) for i in dims])


@op("Size")
def _size(cx, node, ins, a):
    shape = cx.shape(ins[0])
    if all(d is not None for d in shape):
        return np.array(int(np.prod(shape, dtype=np.int64)), np.int64)
    return cx.g.reduction_product(cx.shape_tensor(cx.t(ins[0])), keep_dims=False)


def _static_shape_arg(cx, v, what):
    """A shape input: a list of ints, None for a run-time element (only from a Sym)."""
    if isinstance(v, Sym):
        return list(v.elems)
    return cx.ints(v, what)


def _dim_value(e):
    """An element of a shape value as an int when it is known now."""
    if isinstance(e, int):
        return e
    if isinstance(e, (DimRef, Prod)):
        v = simplify(as_prod(e))
        return v if isinstance(v, int) else None
    return None


@op("Reshape")
def _reshape(cx, node, ins, a):
    x = ins[0]
    spec = _static_shape_arg(cx, ins[1], "the shape")
    xs = cx.shape(x)
    allowzero = a.get("allowzero", 0)
    out = []
    for i, e in enumerate(spec):
        if not isinstance(e, DimRef) and e == 0 and not allowzero:
            if i >= len(xs):
                cx.fail(f"shape {spec} copies dim {i} (0) from an input of rank {len(xs)}")
            out.append(xs[i] if xs[i] is not None else DimRef(x, i))
        else:
            out.append(e)
    vals = [_dim_value(e) for e in out]
    if isinstance(x, np.ndarray) and all(v is not None for v in vals):
        return x.reshape(vals)
    xt = cx.t(x)
    if -1 in vals and any(v is None for v in vals):
        # x.view(B, -1): run-time dims copied from x itself consume x's unknown dims, so the -1
        # is the product of x's remaining (static) dims over the other static elements
        refs = [d for e, v in zip(out, vals) if v is None for d in (as_prod(e).dims if as_prod(e) else [None])]
        used = {d.axis for d in refs if isinstance(d, DimRef) and d.tensor is xt}
        rest = [d for i, d in enumerate(xs) if i not in used]
        if all(d is not None for d in rest) and all(xs[i] is None for i in used) and len(used) == len(refs):
            known = [v for v in vals if v not in (None, -1)] + [as_prod(e).coef for e, v in zip(out, vals)
                                                                if v is None]
            den = int(np.prod(known, dtype=np.int64))
            num = int(np.prod(rest, dtype=np.int64))
            if den and num % den == 0:
                vals = [num // den if v == -1 else v for v in vals]
                out = [vals[i] if vals[i] is not None else out[i] for i in range(len(out))]
    unknown = [i for i, v in enumerate(vals) if v is None]
    if not unknown:
        return cx.g.reshape(xt, vals)
    if len(unknown) == 1 and -1 not in vals:
        return cx.g.reshape(xt, [-1 if v is None else v for v in vals])
    if -1 in vals:
        # assume the run-time elements multiply to x's unknown dims (B*heads from a (B*heads, S, S)
        # tensor): then -1 is static; reshape_like checks the element count when the graph runs
        known_x = [d for d in xs if d is not None]
        den = int(np.prod([v for v in vals if v not in (None, -1)], dtype=np.int64)) * \
            int(np.prod([as_prod(out[i]).coef for i in unknown], dtype=np.int64))
        num = int(np.prod(known_x, dtype=np.int64))
        if not den or num % den or any(as_prod(out[i]) is None for i in unknown):
            cx.unsupported(f"reshape of {xt.shape} to a shape with both -1 and several run-time dims "
                           f"({spec}){cx.shape_hint()}")
        vals = [num // den if v == -1 else v for v in vals]
    return cx.g.reshape_like(xt, _like_tensor(cx, [v if v is not None else out[i] for i, v in enumerate(vals)]))


def _dim_vector(cx, d):
    """A 1-D bool zeros tensor whose length is the run-time dim d (a DimRef)."""
    g = cx.g
    t = d.tensor
    sl = g.strided_slice(t, [0] * t.ndim, [1] * t.ndim, [1] * t.ndim, end_mask=1 << d.axis)
    return g.full_like(g.reshape(sl, [-1]), 0, dtype="bool")


def _dim_tensor(cx, e, rank, pos):
    """A bool zeros tensor of size 1 everywhere but pos, where it has the run-time size e."""
    g = cx.g
    shape = [1] * rank
    shape[pos] = -1
    p = as_prod(e)
    if p is None:
        cx.unsupported("a shape element computed at run time (not a product of dims) is not supported here")
    parts = [_dim_vector(cx, d) for d in p.dims]
    if p.coef != 1 or not parts:
        parts.append(g.zeros([p.coef], dtype="bool"))
    n = len(parts)
    acc = None
    for k, v in enumerate(parts):  # an outer "or": shape (d1, d2, ..., coef), then flattened
        v = g.reshape(v, [1] * k + [-1] + [1] * (n - k - 1))
        acc = v if acc is None else g.logical_or(acc, v)
    return g.reshape(acc, shape)


def _like_tensor(cx, elems):
    """A bool tensor of zeros whose shape is elems (ints and run-time DimRefs), for the *_like ops."""
    g = cx.g
    rank = len(elems)
    like = g.zeros([e if isinstance(e, int) else 1 for e in elems], dtype="bool")
    for i, e in enumerate(elems):
        if not isinstance(e, int):
            like = g.logical_or(like, _dim_tensor(cx, e, rank, i))
    return like


@op("Transpose")
def _transpose(cx, node, ins, a):
    x = cx.t(ins[0])
    perm = a.get("perm")
    if perm is None:
        perm = list(range(x.ndim))[::-1]
    return cx.g.transpose(x, list(perm))


def _axes_arg(cx, ins, a, idx=1, name="axes"):
    if name in a:
        return list(a[name])
    if len(ins) > idx and ins[idx] is not None:
        return cx.ints(ins[idx], "axes")
    return None


@op("Squeeze")
def _squeeze(cx, node, ins, a):
    x = ins[0]
    axes = _axes_arg(cx, ins, a)
    if isinstance(x, Sym):
        if not x.scalar and len(x.elems) == 1 and axes in (None, [0], [-1]):  # a shape element as a scalar
            e = x.elems[0]
            return np.array(e, np.int64) if isinstance(e, int) else Sym([e], scalar=True)
        return cx.g.squeeze(cx.t(x), axes)
    shape = cx.shape(x)
    if axes is None:
        if any(d is None for d in shape):
            cx.unsupported("Squeeze without axes of an input with unknown dims")
        axes = [i for i, d in enumerate(shape) if d == 1]
    axes = [cx.axis(ax, len(shape)) for ax in axes]
    for ax in axes:
        if shape[ax] not in (1, None):
            cx.fail(f"cannot squeeze axis {ax} of size {shape[ax]} (shape {shape})")
    if isinstance(x, np.ndarray):
        return x.reshape([d for i, d in enumerate(shape) if i not in axes])
    return cx.g.squeeze(x, axes)


@op("Unsqueeze")
def _unsqueeze(cx, node, ins, a):
    x = ins[0]
    axes = _axes_arg(cx, ins, a)
    r = cx.rank(x) + len(axes)
    axes = sorted(cx.axis(ax, r) for ax in axes)
    if len(set(axes)) != len(axes):
        cx.fail(f"axes {axes} repeat")
    if isinstance(x, Sym) and x.scalar and axes == [0]:
        return Sym(x.elems)
    if isinstance(x, np.ndarray):
        return x.reshape(_unsq_shape(x.shape, axes))
    return cx.g.expand_dims(cx.t(x), axes)


def _unsq_shape(shape, axes):
    out, it = [], iter(shape)
    for i in range(len(shape) + len(axes)):
        out.append(1 if i in axes else next(it))
    return out


@op("Flatten")
def _flatten(cx, node, ins, a):
    x = cx.t(ins[0])
    axis = int(a.get("axis", 1))
    axis = axis + x.ndim if axis < 0 else axis
    if not 0 <= axis <= x.ndim:
        cx.fail(f"axis {a.get('axis')} is out of range for rank {x.ndim}")
    return cx.g.flatten_2d(x, axis=axis) if x.ndim else cx.g.reshape(x, [1, 1])


@op("Concat")
def _concat(cx, node, ins, a):
    vals = [v for v in ins if v is not None]
    if "axis" not in a:
        cx.fail("the 'axis' attribute is required")
    r = cx.rank(vals[0])
    axis = cx.axis(a["axis"], r)
    if r == 1 and any(isinstance(v, Sym) for v in vals) and all(isinstance(v, (Sym, np.ndarray)) for v in vals):
        elems = []
        for v in vals:
            elems += v.elems if isinstance(v, Sym) else [int(e) for e in v.reshape(-1)]
        return Sym(elems)
    ts = [cx.t(v) for v in vals if cx.shape(v)[axis] != 0] or [cx.t(vals[0])]
    return ts[0] if len(ts) == 1 and len(vals) == 1 else cx.g.concat(ts, axis=axis) if len(ts) > 1 else \
        cx.g.identity(ts[0])


@op("Split")
def _split(cx, node, ins, a):
    x = cx.t(ins[0])
    axis = cx.axis(a.get("axis", 0), x.ndim)
    n_out = len(node.output)
    sizes = None
    if len(ins) > 1 and ins[1] is not None:
        sizes = cx.ints(ins[1], "split")
    elif "split" in a:
        sizes = list(a["split"])
    if sizes is None:
        d = x.shape[axis]
        n = a.get("num_outputs", n_out)
        if d is None:
            if "num_outputs" in a and n != n_out:
                cx.fail(f"num_outputs {n} but {n_out} outputs")
            return list(cx.g.split(x, num_splits=n, axis=axis))
        chunk = -(-d // n)
        sizes = [min(chunk, d - i * chunk) for i in range(n)]
        if any(s < 0 for s in sizes):
            cx.fail(f"cannot split a dim of {d} into {n} parts")
    if sum(sizes) != (x.shape[axis] if x.shape[axis] is not None else sum(sizes)):
        cx.fail(f"split sizes {sizes} do not add up to dim {axis} of shape {x.shape}")
    if len(sizes) == 1:
        return [cx.g.identity(x)]
    return list(cx.g.split(x, split_sizes=sizes, axis=axis))


@op("Slice")
def _slice(cx, node, ins, a):
    x = ins[0]
    starts, ends = cx.ints(ins[1], "starts"), cx.ints(ins[2], "ends")
    shape = cx.shape(x)
    r = len(shape)
    axes = cx.ints(ins[3], "axes") if len(ins) > 3 and ins[3] is not None else list(range(len(starts)))
    steps = cx.ints(ins[4], "steps") if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        cx.fail(f"starts {starts}, ends {ends}, axes {axes} and steps {steps} differ in length")
    axes = [cx.axis(ax, r) for ax in axes]
    if len(set(axes)) != len(axes):
        cx.fail(f"axes {axes} repeat")
    big = 2 ** 62
    st, en, sp = [0] * r, [0] * r, [1] * r
    smask = emask = (1 << r) - 1  # untouched dims: everything
    for s, e, ax, step in zip(starts, ends, axes, steps):
        if step == 0:
            cx.fail("a step is 0")
        s, e = max(min(s, big), -big), max(min(e, big), -big)
        smask &= ~(1 << ax)
        emask &= ~(1 << ax)
        d = shape[ax]
        if d is not None:
            s, e, step = slice(s, e, step).indices(d)
            if step < 0 and e < 0:
                emask |= 1 << ax  # down to index 0 inclusive
                e = 0
        st[ax], en[ax], sp[ax] = s, e, step
    if isinstance(x, Sym):
        if r == 1 and sp[0] > 0 and not (smask | emask):
            return Sym(x.elems[st[0]:en[0]:sp[0]])
        if r == 1:
            return Sym(x.elems[slice(None if smask else st[0], None if emask else en[0], sp[0])])
    if isinstance(x, np.ndarray):
        sl = tuple(slice(None if smask >> i & 1 else st[i], None if emask >> i & 1 else en[i], sp[i])
                   for i in range(r))
        return _contig(x[sl])
    return cx.g.strided_slice(cx.t(x), st, en, sp, start_mask=smask, end_mask=emask)


@op("Gather")
def _gather(cx, node, ins, a):
    x, idx = ins[0], ins[1]
    r = cx.rank(x)
    axis = cx.axis(a.get("axis", 0), r)
    if isinstance(x, Sym) and isinstance(idx, np.ndarray):
        n = len(x.elems)
        sel = [x.elems[int(i) + n if i < 0 else int(i)] for i in idx.reshape(-1)]
        if idx.ndim == 0:
            e = sel[0]
            return np.array(e, np.int64) if isinstance(e, int) else Sym([e], scalar=True)
        if idx.ndim == 1:
            return Sym(sel)
    if isinstance(x, np.ndarray) and isinstance(idx, np.ndarray):
        d = x.shape[axis]
        if idx.size and (idx.min() < -d or idx.max() >= d):
            cx.fail(f"an index is out of range for axis {axis} of size {d}", kind=_index_error())
        return np.take(x, idx.astype(np.int64), axis=axis)
    return cx.g.gather(cx.t(x), cx.t(idx), axis=axis)


def _index_error():
    from ._errors import OnnxImportError
    return OnnxImportError


@op("GatherElements")
def _gather_el(cx, node, ins, a):
    x = cx.t(ins[0])
    return cx.g.gather_along_axis(x, cx.t(ins[1]), axis=cx.axis(a.get("axis", 0), x.ndim))


@op("GatherND")
def _gather_nd(cx, node, ins, a):
    return cx.g.gather_nd(cx.t(ins[0]), cx.t(ins[1]), batch_dims=int(a.get("batch_dims", 0)))


_SCATTER_MODES = {"none": "set", "add": "add", "mul": "mul", "max": "max", "min": "min"}


@op("ScatterElements")
def _scatter_el(cx, node, ins, a):
    x = cx.t(ins[0])
    mode = _SCATTER_MODES.get(a.get("reduction", "none"))
    if mode is None:
        cx.fail(f"unknown reduction {a.get('reduction')!r}")
    return cx.g.scatter_along_axis_with_data(x, cx.t(ins[2]), cx.t(ins[1]), axis=cx.axis(a.get("axis", 0), x.ndim),
                                             mode=mode)


@op("ScatterND")
def _scatter_nd(cx, node, ins, a):
    mode = _SCATTER_MODES.get(a.get("reduction", "none"))
    if mode is None:
        cx.fail(f"unknown reduction {a.get('reduction')!r}")
    return cx.g.scatter_nd_with_data(cx.t(ins[0]), cx.t(ins[2]), cx.t(ins[1]), mode=mode)


@op("Expand")
def _expand(cx, node, ins, a):
    x = ins[0]
    spec = _static_shape_arg(cx, ins[1], "the shape")
    xs = cx.shape(x)
    r = max(len(xs), len(spec))
    xs_p = [1] * (r - len(xs)) + list(xs)
    sp_p = [1] * (r - len(spec)) + list(spec)
    out = []
    for d, e in zip(xs_p, sp_p):
        ev = _dim_value(e)
        if ev == 1:
            out.append(d if d is not None else None)
        elif d == 1 or d is None and ev is not None and ev != 1:
            out.append(ev if ev is not None else e)
        elif ev is None:
            out.append(d if d is not None else e)
        elif d != ev:
            cx.fail(f"cannot expand shape {tuple(xs)} to {spec}")
        else:
            out.append(d)
    if isinstance(x, np.ndarray) and all(isinstance(v, int) for v in out):
        return _contig(np.broadcast_to(x, out))
    xt = cx.t(x)
    if all(isinstance(v, int) or v is None for v in out):
        if any(v is None for v in out):
            # unknown dims of x stay as they are (x's own dim, or 1 broadcast against it)
            return xt * cx.g.ones([v if v is not None else 1 for v in out], dtype=xt.dtype) if \
                _is_number(xt) else cx.g.broadcast_to(xt, out)
        return cx.g.broadcast_to(xt, out)
    return cx.g.broadcast_like(xt, _like_tensor(cx, [v if v is not None else 1 for v in out]))


def _is_number(t):
    return t.dtype.name != "bool"


@op("Tile")
def _tile(cx, node, ins, a):
    reps = cx.ints(ins[1], "repeats")
    x = ins[0]
    if isinstance(x, np.ndarray):
        return np.tile(x, reps)
    return cx.g.tile(cx.t(x), reps)


@op("ConstantOfShape")
def _const_of_shape(cx, node, ins, a):
    from ._model import _onnx
    if "value" in a:
        t = a["value"]
        val = np.asarray(_onnx().numpy_helper.to_array(t)).reshape(-1)
        dt = np_dtype(t.data_type, "value")
    else:
        val, dt = np.zeros(1, np.float32), np.float32
    spec = _static_shape_arg(cx, ins[0], "the shape")
    if all(isinstance(e, int) for e in spec):
        if any(e < 0 for e in spec):
            cx.fail(f"negative dim in shape {spec}")
        return np.full(spec, val[0], dt)
    like = _like_tensor(cx, spec)
    return cx.g.full_like(like, val[0].item(), dtype=_dtypes.as_dtype(dt))


@op("Range")
def _range(cx, node, ins, a):
    vals = [cx.c(v, w) for v, w in zip(ins, ("start", "limit", "delta"))]
    start, limit, delta = (np.asarray(v).reshape(()) for v in vals)
    if delta == 0:
        cx.fail("delta is 0")
    n = max(int(np.ceil((limit - start) / delta)), 0)
    dt = np.asarray(vals[0]).dtype
    return (start + np.arange(n, dtype=np.float64 if dt.kind == "f" else np.int64) * delta).astype(dt)


@op("EyeLike")
def _eyelike(cx, node, ins, a):
    shape = cx.shape(ins[0])
    if any(d is None for d in shape) or len(shape) != 2:
        cx.unsupported("EyeLike needs a 2-D input of static shape")
    dt = np_dtype(a["dtype"], "dtype") if "dtype" in a else _dtypes.to_numpy_dtype(cx.dtype(ins[0]))
    return np.eye(shape[0], shape[1], k=int(a.get("k", 0)), dtype=dt)


@op("OneHot")
def _onehot(cx, node, ins, a):
    idx = ins[0]
    depth = int(np.asarray(cx.c(ins[1], "depth")).reshape(-1)[0])
    values = ins[2]
    r = cx.rank(idx) + 1
    axis = cx.axis(a.get("axis", -1), r)
    it = cx.t(idx)
    if _is_float(it.dtype):
        it = cx.g.cast(it, "int64")
    it = cx.g.select(cx.g.less_than(it, 0), it + depth, it)  # ONNX: negative indices count from the end
    if isinstance(values, np.ndarray):
        off, on = values.reshape(-1)[:2]
        return cx.g.one_hot(it, depth, axis=axis, dtype=_dtypes.as_dtype(values.dtype), on_value=float(on),
                            off_value=float(off))
    v = cx.g.reshape(cx.t(values), [2])
    hot = cx.g.one_hot(it, depth, axis=axis, dtype="bool", on_value=1.0, off_value=0.0)
    return cx.g.select(hot, cx.g.slice(v, 0, 1, 1), cx.g.slice(v, 0, 0, 1))


@op("Trilu")
def _trilu(cx, node, ins, a):
    x = cx.t(ins[0])
    k = int(np.asarray(cx.c(ins[1], "k")).reshape(())) if len(ins) > 1 and ins[1] is not None else 0
    n, m = x.shape[-2], x.shape[-1]
    if n is None or m is None:
        cx.unsupported("Trilu needs static last two dims")
    ones = np.ones((n, m), bool)
    mask = np.triu(ones, k) if a.get("upper", 1) else np.tril(ones, k)
    return cx.g.select(cx.g.constant(mask), x, cx.g.zeros([n, m], dtype=x.dtype))


def _cumulative(method):
    def h(cx, node, ins, a):
        x = cx.t(ins[0])
        axis = cx.axis(int(np.asarray(cx.c(ins[1], "axis")).reshape(())), x.ndim)
        return getattr(cx.g, method)(x, axis=axis, exclusive=bool(a.get("exclusive", 0)),
                                     reverse=bool(a.get("reverse", 0)))
    return h


op("CumSum")(_cumulative("cumulative_sum"))
op("CumProd")(_cumulative("cumulative_product"))


@op("TopK", fold=False)
def _topk(cx, node, ins, a):
    x = cx.t(ins[0])
    k = int(np.asarray(cx.c(ins[1], "K")).reshape(-1)[0])
    axis = cx.axis(a.get("axis", -1), x.ndim)
    fn = cx.g.top_k if a.get("largest", 1) else cx.g.bottom_k
    v, i = fn(x, k, axis=axis)
    return [v, cx.g.cast(i, "int64")]


@op("NonZero", fold=False)
def _nonzero(cx, node, ins, a):
    x = cx.t(ins[0])
    if x.ndim == 0:
        x = cx.g.reshape(x, [1])
        nz = cx.g.non_zero_indices(x)  # (count, 1); a scalar's result is (0, count)
        return cx.g.cast(cx.g.slice(cx.g.transpose(nz, [1, 0]), 0, 0, 0), "int64")
    return cx.g.cast(cx.g.transpose(cx.g.non_zero_indices(x), [1, 0]), "int64")


@op("Compress", fold=False)
def _compress(cx, node, ins, a):
    x = cx.t(ins[0])
    cond = cx.t(ins[1])
    if "axis" not in a:
        x = cx.g.reshape(x, [-1])
        axis = 0
    else:
        axis = cx.axis(a["axis"], x.ndim)
    d = x.shape[axis]
    if cond.shape[0] is not None and d is not None and cond.shape[0] > d:
        cond = cx.g.slice(cond, 0, 0, d)
    idx = cx.g.reshape(cx.g.non_zero_indices(cond), [-1])
    return cx.g.gather(x, idx, axis=axis)


@op("ReverseSequence")
def _revseq(cx, node, ins, a):
    x = cx.t(ins[0])
    lens = cx.t(ins[1])
    taxis, baxis = a.get("time_axis", 0), a.get("batch_axis", 1)
    T = x.shape[taxis]
    if T is None:
        cx.unsupported("ReverseSequence needs a static time dim")
    g = cx.g
    t = g.constant(np.arange(T, dtype=np.int64))
    shape_t = [1] * x.ndim
    shape_t[taxis] = T
    shape_b = [1] * x.ndim
    shape_b[baxis] = -1
    tt = g.reshape(t, shape_t)
    ll = g.reshape(g.cast(lens, "int64"), shape_b)
    idx = g.select(g.less_than(tt, ll), ll - 1 - tt, tt)
    idx = g.broadcast_like(idx, x)
    return g.gather_along_axis(x, idx, axis=taxis)


# ---------------------------------------------------------------- reductions

def _reduce(kind):
    def h(cx, node, ins, a):
        x = cx.t(ins[0])
        attr_axes = kind != "sum" and cx.opset < 18
        axes = list(a["axes"]) if attr_axes and "axes" in a else (
            cx.ints(ins[1], "axes") if len(ins) > 1 and ins[1] is not None else None)
        keep = bool(a.get("keepdims", 1))
        g = cx.g
        if not axes:
            if a.get("noop_with_empty_axes", 0):
                return g.identity(x)
            axes = list(range(x.ndim))
        axes = sorted({cx.axis(ax, x.ndim) for ax in axes})
        if not axes:  # a scalar
            return g.identity(x)
        if kind == "sum":
            return g.reduction_sum(x, axes=axes, keep_dims=keep)
        if kind == "mean":
            return g.mean(x, axes=axes, keep_dims=keep)
        if kind in ("max", "min") and any(x.shape[ax] == 0 for ax in axes) and _is_float(x.dtype):
            out = [1 if i in axes else d for i, d in enumerate(x.shape)] if keep else \
                [d for i, d in enumerate(x.shape) if i not in axes]
            if any(d is None for d in out):
                cx.unsupported("an empty reduction with unknown dims")
            return g.full(out, float("-inf") if kind == "max" else float("inf"), dtype=x.dtype)
        if kind == "max":
            if x.dtype.name == "bool":
                return g.reduction_or(x, axes=axes, keep_dims=keep)
            return g.reduction_maximum(x, axes=axes, keep_dims=keep)
        if kind == "min":
            if x.dtype.name == "bool":
                return g.reduction_and(x, axes=axes, keep_dims=keep)
            return g.reduction_minimum(x, axes=axes, keep_dims=keep)
        if kind == "prod":
            return g.reduction_product(x, axes=axes, keep_dims=keep)
        if kind == "l1":
            return g.reduction_sum(g.absolute(x), axes=axes, keep_dims=keep)
        if kind == "l2":
            if not _is_float(x.dtype):
                return g.cast(g.square_root(g.cast(g.reduction_sum(x * x, axes=axes, keep_dims=keep), "float32")),
                              x.dtype)
            return g.square_root(g.reduction_sum(x * x, axes=axes, keep_dims=keep))
        if kind == "logsum":
            return g.logarithm(g.reduction_sum(x, axes=axes, keep_dims=keep))
        if kind == "logsumexp":
            if any(x.shape[ax] == 0 for ax in axes):
                return g.logarithm(g.reduction_sum(g.exponent(x), axes=axes, keep_dims=keep))
            return g.logsumexp(x, axes=axes, keep_dims=keep)
        if kind == "sumsquare":
            return g.reduction_sum(x * x, axes=axes, keep_dims=keep)
        raise AssertionError(kind)
    return h


for _k, _m in {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min",
               "ReduceProd": "prod", "ReduceL1": "l1", "ReduceL2": "l2", "ReduceLogSum": "logsum",
               "ReduceLogSumExp": "logsumexp", "ReduceSumSquare": "sumsquare"}.items():
    op(_k)(_reduce(_m))


def _argreduce(maximum):
    def h(cx, node, ins, a):
        x = cx.t(ins[0])
        axis = cx.axis(a.get("axis", 0), x.ndim)
        keep = bool(a.get("keepdims", 1))
        g = cx.g
        fn = g.reduction_arg_maximum if maximum else g.reduction_arg_minimum
        if a.get("select_last_index", 0):
            n = x.shape[axis]
            if n is None:
                cx.unsupported("select_last_index needs a static dim along axis")
            i = fn(g.reverse(x, axes=[axis]), axis=axis, keep_dims=keep, dtype="int64")
            return (n - 1) - i
        return fn(x, axis=axis, keep_dims=keep, dtype="int64")
    return h


op("ArgMax")(_argreduce(True))
op("ArgMin")(_argreduce(False))


# ---------------------------------------------------------------- matrix products

@op("MatMul")
def _matmul(cx, node, ins, a):
    x, y = cx.t(ins[0]), cx.t(ins[1])
    g = cx.g
    if x.ndim == 1 and y.ndim == 1:
        return g.reshape(g.matrix_multiplication(g.reshape(x, [1, -1]), g.reshape(y, [-1, 1])), [])
    if x.ndim == 1:
        r = g.matrix_multiplication(g.expand_dims(x, 0), y)
        return g.squeeze(r, [-2])
    if y.ndim == 1:
        return g.squeeze(g.matrix_multiplication(x, g.expand_dims(y, 1)), [-1])
    return g.matrix_multiplication(x, y)


@op("Gemm")
def _gemm(cx, node, ins, a):
    A, B = cx.t(ins[0]), cx.t(ins[1])
    g = cx.g
    if a.get("transA", 0):
        A = g.transpose(A, [1, 0])
    if a.get("transB", 0):
        B = g.transpose(B, [1, 0])
    alpha, beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
    y = g.matrix_multiplication(A, B)
    if alpha != 1.0:
        y = y * alpha
    if len(ins) > 2 and ins[2] is not None and beta != 0.0:
        c = cx.t(ins[2])
        y = y + (c * beta if beta != 1.0 else c)
    return y


@op("MatMulInteger")
def _matmul_int(cx, node, ins, a):
    g = cx.g
    x = g.cast(cx.t(ins[0]), "int32")
    y = g.cast(cx.t(ins[1]), "int32")
    if len(ins) > 2 and ins[2] is not None:
        zp = g.cast(cx.t(ins[2]), "int32")
        x = x - (g.expand_dims(zp, -1) if zp.ndim == 1 and zp.shape[0] != 1 else zp)
    if len(ins) > 3 and ins[3] is not None:
        y = y - g.cast(cx.t(ins[3]), "int32")
    return g.matrix_multiplication(x, y)


@op("Einsum")
def _einsum(cx, node, ins, a):
    from ._einsum import einsum
    return einsum(cx, a.get("equation", ""), [cx.t(v) for v in ins])


# ---------------------------------------------------------------- neural-network ops

def _conv_padding(cx, a, nsp):
    auto = a.get("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        pads = list(a.get("pads", [0] * (2 * nsp)))
        if len(pads) != 2 * nsp:
            cx.fail(f"pads {pads} must have {2 * nsp} values")
        padding = []
        for i in range(nsp):
            padding += [pads[i], pads[i + nsp]]
        return "explicit", padding
    style = {"SAME_UPPER": "same", "SAME_LOWER": "same_lower", "VALID": "valid"}.get(auto)
    if style is None:
        cx.fail(f"unknown auto_pad {auto!r}")
    return style, [0] * (2 * nsp)


@op("Conv")
def _conv(cx, node, ins, a):
    x, w = cx.t(ins[0]), cx.t(ins[1])
    nsp = x.ndim - 2
    if nsp < 1:
        cx.fail(f"input of shape {x.shape} has no spatial dims")
    style, padding = _conv_padding(cx, a, nsp)
    y = cx.g.convolution(x, w, strides=list(a.get("strides", [1] * nsp)),
                         dilation_rates=list(a.get("dilations", [1] * nsp)), padding=padding,
                         padding_style=style, groups=int(a.get("group", 1)))
    if len(ins) > 2 and ins[2] is not None:
        y = y + cx.g.reshape(cx.t(ins[2]), [-1] + [1] * nsp)
    return y


@op("ConvTranspose")
def _conv_transpose(cx, node, ins, a):
    x, w = cx.t(ins[0]), cx.t(ins[1])
    g = cx.g
    nsp = x.ndim - 2
    groups = int(a.get("group", 1))
    strides = list(a.get("strides", [1] * nsp))
    dil = list(a.get("dilations", [1] * nsp))
    outpad = list(a.get("output_padding", [0] * nsp))
    ks = list(w.shape[2:])
    if any(k is None for k in ks) or w.shape[1] is None:
        cx.unsupported("ConvTranspose needs static weights")
    insp = list(x.shape[2:])
    if any(d is None for d in insp):
        cx.unsupported("ConvTranspose needs static spatial dims")
    full = [strides[i] * (insp[i] - 1) + outpad[i] + (ks[i] - 1) * dil[i] + 1 for i in range(nsp)]
    auto = a.get("auto_pad", "NOTSET")
    if "output_shape" in a:
        out_sp = list(a["output_shape"])[-nsp:]
        total = [full[i] - out_sp[i] for i in range(nsp)]
        if auto == "SAME_UPPER":
            pads = [(t // 2, t - t // 2) for t in total]
        else:
            pads = [(t - t // 2, t // 2) for t in total]
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        out_sp = [insp[i] * strides[i] for i in range(nsp)]
        total = [full[i] - out_sp[i] for i in range(nsp)]
        pads = [(t // 2, t - t // 2) if auto == "SAME_UPPER" else (t - t // 2, t // 2) for t in total]
    else:
        p = list(a.get("pads", [0] * (2 * nsp))) if auto != "VALID" else [0] * (2 * nsp)
        pads = [(p[i], p[i + nsp]) for i in range(nsp)]
        out_sp = [full[i] - pads[i][0] - pads[i][1] for i in range(nsp)]
    if any(t < 0 for pr in pads for t in pr):
        cx.unsupported(f"output shape {out_sp} larger than the full transposed convolution {full}")
    cout = w.shape[1] * groups
    padding = [v for pr in pads for v in pr]
    n = x.shape[0]
    if n is None:
        cx.unsupported("ConvTranspose needs a static batch dim")
    # the data gradient of the forward convolution from the output's shape to x's
    like = g.zeros([n, cout] + out_sp, dtype=x.dtype)
    y = g.convolution_data_gradient(x, w, like, strides=strides, dilation_rates=dil, padding=padding,
                                    padding_style="explicit", groups=groups)
    if len(ins) > 2 and ins[2] is not None:
        y = y + g.reshape(cx.t(ins[2]), [-1] + [1] * nsp)
    return y


def _pool_geometry(cx, x, a):
    nsp = x.ndim - 2
    ks = list(a.get("kernel_shape", []))
    if len(ks) != nsp:
        cx.fail(f"kernel_shape {ks} must have {nsp} values for an input of shape {x.shape}")
    style, padding = _conv_padding(cx, a, nsp)
    kw = dict(kernel_sizes=ks, strides=list(a.get("strides", [1] * nsp)),
              dilation_rates=list(a.get("dilations", [1] * nsp)), padding_style=style, padding=padding,
              ceil_mode=bool(a.get("ceil_mode", 0)))
    return kw


@op("MaxPool")
def _maxpool(cx, node, ins, a):
    x = cx.t(ins[0])
    g = cx.g
    kw = _pool_geometry(cx, x, a)
    want_idx = len(node.output) > 1 and node.output[1]
    if not want_idx:
        if not _is_float(x.dtype):
            return g.cast(g.max_pooling_nd(g.cast(x, "float32"), **kw), x.dtype)
        return g.max_pooling_nd(x, **kw)
    y, idx = g.max_pooling_nd_return_indices(x, indices_dtype="int64", **kw)
    sp = x.shape[2:]
    if any(d is None for d in sp) or x.shape[1] is None:
        cx.unsupported("MaxPool indices need static channel and spatial dims")
    plane = int(np.prod(sp))
    if a.get("storage_order", 0):
        if len(sp) != 2:
            cx.unsupported("storage_order=1 with other than 2 spatial dims")
        h, w = sp
        idx = g.floor_division(idx, w) + (idx - g.floor_division(idx, w) * w) * h
    nc = g.constant(np.arange(x.shape[1], dtype=np.int64).reshape([1, -1] + [1] * len(sp)) * plane)
    bidx = g.cast(g.cumulative_sum(g.full_like(g.slice(idx, 1, 0, 1), 1, dtype="int64"), axis=0, exclusive=True),
                  "int64") * (plane * x.shape[1])
    return [y, idx + nc + bidx]


@op("AveragePool")
def _avgpool(cx, node, ins, a):
    x = cx.t(ins[0])
    kw = _pool_geometry(cx, x, a)
    return cx.g.avg_pooling_nd(x, include_zero_pad=bool(a.get("count_include_pad", 0)), **kw)


@op("LpPool")
def _lppool(cx, node, ins, a):
    x = cx.t(ins[0])
    kw = _pool_geometry(cx, x, a)
    p = int(a.get("p", 2))
    g = cx.g
    if p == 2:
        return g.l2_norm_pooling_nd(x, **kw)
    s = g.sum_pooling_nd(g.power(g.absolute(x), float(p)), **kw)
    return g.power(s, 1.0 / p)


@op("GlobalAveragePool")
def _gap(cx, node, ins, a):
    x = cx.t(ins[0])
    return cx.g.mean(x, axes=list(range(2, x.ndim)), keep_dims=True)


@op("GlobalMaxPool")
def _gmp(cx, node, ins, a):
    x = cx.t(ins[0])
    return cx.g.reduction_maximum(x, axes=list(range(2, x.ndim)), keep_dims=True)


@op("GlobalLpPool")
def _glp(cx, node, ins, a):
    x = cx.t(ins[0])
    p = float(a.get("p", 2))
    g = cx.g
    s = g.reduction_sum(g.power(g.absolute(x), p), axes=list(range(2, x.ndim)), keep_dims=True)
    return g.power(s, 1.0 / p)


def _per_channel(cx, v, rank, axis=1):
    t = cx.t(v)
    shape = [1] * rank
    shape[axis] = -1
    return cx.g.reshape(t, shape)


@op("BatchNormalization")
def _batchnorm(cx, node, ins, a):
    x = cx.t(ins[0])
    g = cx.g
    eps = float(a.get("epsilon", 1e-5))
    r = x.ndim
    scale, bias, mean, var = (_per_channel(cx, v, r) for v in ins[1:5])
    if not a.get("training_mode", 0):
        return (x - mean) * g.reverse_square_root(var + eps) * scale + bias
    mom = float(a.get("momentum", 0.9))
    axes = [i for i in range(r) if i != 1]
    bm, bv = g.moments(x, axes)
    y = (x - bm) * g.reverse_square_root(bv + eps) * scale + bias
    rm = g.reshape(mean * mom + bm * (1 - mom), [-1])
    rv = g.reshape(var * mom + bv * (1 - mom), [-1])
    return [y, rm, rv]


@op("InstanceNormalization")
def _instnorm(cx, node, ins, a):
    x = cx.t(ins[0])
    g = cx.g
    eps = float(a.get("epsilon", 1e-5))
    axes = list(range(2, x.ndim))
    m, v = g.moments(x, axes)
    return (x - m) * g.reverse_square_root(v + eps) * _per_channel(cx, ins[1], x.ndim) + \
        _per_channel(cx, ins[2], x.ndim)


@op("LayerNormalization")
def _layernorm(cx, node, ins, a):
    x = cx.t(ins[0])
    g = cx.g
    axis = cx.axis(a.get("axis", -1), x.ndim)
    eps = float(a.get("epsilon", 1e-5))
    axes = list(range(axis, x.ndim))
    stash = a.get("stash_type", 1)
    xc = g.cast(x, "float32") if stash == 1 and x.dtype.name in ("float16", "bfloat16") else x
    m, v = g.moments(xc, axes)
    inv = g.reverse_square_root(v + eps)
    y = (xc - m) * inv
    if xc is not x:
        y = g.cast(y, x.dtype)
    y = y * cx.t(ins[1])
    if len(ins) > 2 and ins[2] is not None:
        y = y + cx.t(ins[2])
    outs = [y]
    if len(node.output) > 1:
        outs += [m, inv]
    return outs


@op("GroupNormalization")
def _groupnorm(cx, node, ins, a):
    x = cx.t(ins[0])
    g = cx.g
    eps = float(a.get("epsilon", 1e-5))
    G = int(a["num_groups"])
    n, c = x.shape[0], x.shape[1]
    if c is None or any(d is None for d in x.shape[2:]):
        cx.unsupported("GroupNormalization needs static channel and spatial dims")
    xs = g.reshape(x, [-1 if n is None else n, G, -1])
    m, v = g.moments(xs, [2])
    y = g.reshape((xs - m) * g.reverse_square_root(v + eps), [-1 if n is None else n] + list(x.shape[1:]))
    scale, bias = cx.t(ins[1]), cx.t(ins[2])
    if cx.opset < 21 and scale.shape[0] == G and G != c:  # opset 18: one scale per group
        scale = g.reshape(g.tile(g.reshape(scale, [G, 1]), [1, c // G]), [c])
        bias = g.reshape(g.tile(g.reshape(bias, [G, 1]), [1, c // G]), [c])
    return y * _per_channel(cx, scale, x.ndim) + _per_channel(cx, bias, x.ndim)


@op("LRN")
def _lrn(cx, node, ins, a):
    x = cx.t(ins[0])
    g = cx.g
    size = int(a["size"])
    alpha, beta, bias = float(a.get("alpha", 1e-4)), float(a.get("beta", 0.75)), float(a.get("bias", 1.0))
    sq = g.expand_dims(x * x, 1)  # (N, 1, C, ...): a pool over channels
    nsp = x.ndim - 1
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    pad = [lo, hi] + [0, 0] * (nsp - 1)
    s = g.sum_pooling_nd(sq, kernel_sizes=[size] + [1] * (nsp - 1), strides=[1] * nsp, padding=pad)
    s = g.squeeze(s, [1])
    return x / g.power(s * (alpha / size) + bias, beta)


@op("MeanVarianceNormalization")
def _mvn(cx, node, ins, a):
    x = cx.t(ins[0])
    g = cx.g
    axes = [cx.axis(ax, x.ndim) for ax in a.get("axes", [0, 2, 3])]
    m, v = g.moments(x, axes)
    return (x - m) / (g.square_root(v) + 1e-9)


@op("LpNormalization")
def _lpnorm(cx, node, ins, a):
    x = cx.t(ins[0])
    g = cx.g
    axis = cx.axis(a.get("axis", -1), x.ndim)
    p = int(a.get("p", 2))
    if p == 1:
        n = g.reduction_sum(g.absolute(x), axes=[axis], keep_dims=True)
    elif p == 2:
        n = g.square_root(g.reduction_sum(x * x, axes=[axis], keep_dims=True))
    else:
        cx.fail(f"p must be 1 or 2, got {p}")
    return g.select(g.equal(n, 0.0), x * 0.0, x / n)  # a zero vector stays zero


def _softmax_like(kind):
    def h(cx, node, ins, a):
        x = cx.t(ins[0])
        g = cx.g
        if cx.opset < 13:  # coerced to 2-D at axis (default 1)
            axis = cx.axis(a.get("axis", 1), x.ndim)
            x2 = g.flatten_2d(x, axis=axis)
            return g.reshape_like(_softmax_apply(cx, kind, x2, 1), x)
        axis = cx.axis(a.get("axis", -1), x.ndim)
        return _softmax_apply(cx, kind, x, axis)
    return h


def _softmax_apply(cx, kind, x, axis):
    g = cx.g
    if kind == "softmax":
        return g.softmax(x, axis=axis)
    if kind == "log_softmax":
        return g.log_softmax(x, axis=axis)
    n = x.shape[axis]
    if n is None:
        cx.unsupported("Hardmax needs a static dim along axis")
    i = g.reduction_arg_maximum(x, axis=axis, keep_dims=False)
    return g.one_hot(i, n, axis=axis, dtype=x.dtype)


op("Softmax")(_softmax_like("softmax"))
op("LogSoftmax")(_softmax_like("log_softmax"))
op("Hardmax")(_softmax_like("hardmax"))


@op("Dropout", fold=False)
def _dropout(cx, node, ins, a):
    x = cx.t(ins[0])
    training = False
    if len(ins) > 2 and ins[2] is not None:
        training = bool(np.asarray(cx.c(ins[2], "training_mode")).reshape(()))
    ratio = float(np.asarray(cx.c(ins[1], "ratio")).reshape(())) if len(ins) > 1 and ins[1] is not None else 0.5
    g = cx.g
    if training and ratio > 0:
        seed = a.get("seed")
        y = g.dropout(x, rate=ratio, seed=seed)
        return [y, g.not_equal(y, 0.0)]
    y = g.identity(x)
    return [y, g.full_like(x, 1, dtype="bool")] if len(node.output) > 1 and node.output[1] else [y]


@op("DepthToSpace")
def _d2s(cx, node, ins, a):
    mode = a.get("mode", "DCR")
    return cx.g.depth_to_space_2d(cx.t(ins[0]), int(a["blocksize"]), data_layout="NCHW",
                                  use_pixel_shuffle_order=(mode == "CRD"))


@op("SpaceToDepth")
def _s2d(cx, node, ins, a):
    return cx.g.space_to_depth_2d(cx.t(ins[0]), int(a["blocksize"]), data_layout="NCHW",
                                  use_pixel_shuffle_order=a.get("mode", "DCR") == "CRD")


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}


@op("Pad")
def _pad(cx, node, ins, a):
    x = ins[0]
    r = cx.rank(x)
    mode = _PAD_MODES.get(a.get("mode", "constant"))
    if mode is None:
        cx.fail(f"unknown mode {a.get('mode')!r}")
    pads = cx.ints(ins[1], "pads")
    cval, cval_t = 0, None
    if len(ins) > 2 and ins[2] is not None:
        if isinstance(ins[2], np.ndarray):
            cv = ins[2].reshape(-1)
            cval = cv[0].item() if cv.size else 0
        else:
            cval_t = cx.g.reshape(cx.t(ins[2]), [])  # a run-time fill value
    axes = cx.ints(ins[3], "axes") if len(ins) > 3 and ins[3] is not None else list(range(r))
    axes = [cx.axis(ax, r) for ax in axes]
    if len(pads) != 2 * len(axes):
        cx.fail(f"pads {pads} must have {2 * len(axes)} values")
    left, right = [0] * r, [0] * r
    for i, ax in enumerate(axes):
        left[ax], right[ax] = pads[i], pads[i + len(axes)]
    xt = cx.t(x)
    g = cx.g
    # negative pads crop
    if any(p < 0 for p in left + right):
        shape = xt.shape
        st = [max(-p, 0) for p in left]
        en = [(shape[i] - max(-right[i], 0)) if shape[i] is not None else -max(-right[i], 0) for i in range(r)]
        emask = sum(1 << i for i in range(r) if right[i] >= 0)
        xt = g.strided_slice(xt, st, en, [1] * r, end_mask=emask)
        left, right = [max(p, 0) for p in left], [max(p, 0) for p in right]
    if not any(left + right):
        return g.identity(xt)
    if cval_t is not None and mode == "constant":
        inside = g.pad(g.full_like(xt, 1, dtype="bool"), left, right, mode="constant", constant_value=0.0)
        return g.select(inside, g.pad(xt, left, right, mode="constant", constant_value=0.0), cval_t)
    return g.pad(xt, left, right, mode=mode, constant_value=float(cval))


@op("Resize")
def _resize(cx, node, ins, a):
    x = cx.t(ins[0])
    g = cx.g
    mode = a.get("mode", "nearest")
    ctm = a.get("coordinate_transformation_mode", "half_pixel")
    nearest_mode = a.get("nearest_mode", "round_prefer_floor")
    if a.get("antialias", 0):
        cx.unsupported("antialias=1")
    if "axes" in a:
        cx.unsupported("the axes attribute")
    if a.get("keep_aspect_ratio_policy", "stretch") != "stretch":
        cx.unsupported(f"keep_aspect_ratio_policy {a['keep_aspect_ratio_policy']!r}")
    scales = cx.c(ins[2], "scales") if len(ins) > 2 and ins[2] is not None else None
    sizes = cx.ints(ins[3], "sizes") if len(ins) > 3 and ins[3] is not None else None
    if scales is not None and scales.size == 0:
        scales = None
    if x.ndim != 4:
        cx.unsupported(f"resizing a rank-{x.ndim} tensor (only NCHW images)")
    if sizes is None:
        if scales is None:
            cx.fail("neither scales nor sizes is given")
        sc = [float(s) for s in scales]
        if sc[0] != 1 or sc[1] != 1:
            cx.unsupported(f"scales {sc} that resize the batch or channel dims")
        if any(x.shape[i] is None for i in (2, 3)):
            cx.unsupported("scales with unknown spatial dims")
        sizes = [int(np.floor(x.shape[i] * sc[i])) for i in (2, 3)]
        if ctm != "align_corners" and any(abs(x.shape[i] * sc[i] - sizes[i - 2]) > 1e-6 or True for i in (2, 3)):
            # half_pixel etc. use the scale itself, which equals out/in only when the product is exact
            exact = all(abs(sizes[i - 2] / x.shape[i] - sc[i]) < 1e-6 for i in (2, 3))
            if not exact and mode != "nearest":
                cx.unsupported(f"scales {sc} whose output size is not exact (the sampling uses the scale itself)")
    else:
        if len(sizes) != 4 or sizes[0] != (x.shape[0] or sizes[0]) or sizes[1] != (x.shape[1] or sizes[1]):
            cx.unsupported(f"sizes {sizes} that change the batch or channel dims")
        sizes = sizes[2:]
    kw = {"data_layout": "NCHW"}
    if mode == "nearest":
        rmode = {"round_prefer_floor": "round_prefer_floor", "round_prefer_ceil": "round_prefer_ceil",
                 "floor": "floor", "ceil": "ceil"}.get(nearest_mode)
        if rmode is None:
            cx.fail(f"unknown nearest_mode {nearest_mode!r}")
        kw.update(mode="nearest", nearest_rounding_mode=rmode)
    elif mode == "linear":
        kw.update(mode="bilinear")
    else:
        cx.unsupported(f"mode {mode!r} (nearest and linear are supported)")
    if ctm == "half_pixel" or ctm == "pytorch_half_pixel" and all(s > 1 for s in sizes):
        kw.update(center_result=True, align_corners=False)
    elif ctm == "align_corners":
        kw.update(center_result=False, align_corners=True)
    elif ctm == "asymmetric":
        kw.update(center_result=False, align_corners=False)
    else:
        cx.unsupported(f"coordinate_transformation_mode {ctm!r}")
    return g.resize(x, sizes, **kw)


# ---------------------------------------------------------------- quantisation

def _axis_param(cx, v, rank, axis, block=0):
    t = cx.t(v)
    if t.ndim == 0 or t.ndim == 1 and t.shape[0] == 1 and rank != 1:
        return t
    axis = cx.axis(axis, rank)
    if block:
        cx.unsupported("blocked quantisation (block_size)")
    shape = [1] * rank
    shape[axis] = -1
    return cx.g.reshape(t, shape)


_QRANGE = {"uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535), "int16": (-32768, 32767),
           "int32": (-2 ** 31, 2 ** 31 - 1)}


@op("QuantizeLinear")
def _quantize(cx, node, ins, a):
    x = cx.t(ins[0])
    g = cx.g
    axis = a.get("axis", 1)
    scale = _axis_param(cx, ins[1], x.ndim, axis, a.get("block_size", 0))
    zp = ins[2] if len(ins) > 2 else None
    if zp is not None:
        out_dt = cx.dtype(zp)
    elif "output_dtype" in a and a["output_dtype"]:
        out_dt = mg_dtype(a["output_dtype"], "output_dtype")
    else:
        out_dt = _dtypes.as_dtype("uint8")
    if out_dt.name not in _QRANGE:
        cx.unsupported(f"quantising to {out_dt.name}")
    lo, hi = _QRANGE[out_dt.name]
    xf = g.cast(x, "float32") if x.dtype.name != "float32" else x
    sf = g.cast(scale, "float32") if scale.dtype.name != "float32" else scale
    q = g.round(xf / sf)  # half to even, as ONNX
    if zp is not None:
        q = q + g.cast(_axis_param(cx, zp, x.ndim, axis), "float32")
    return g.cast(g.clamp(q, float(lo), float(hi)), out_dt)


@op("DequantizeLinear")
def _dequantize(cx, node, ins, a):
    x = cx.t(ins[0])
    g = cx.g
    axis = a.get("axis", 1)
    scale = _axis_param(cx, ins[1], x.ndim, axis, a.get("block_size", 0))
    xf = g.cast(x, "float32")
    if len(ins) > 2 and ins[2] is not None:
        xf = xf - g.cast(_axis_param(cx, ins[2], x.ndim, axis), "float32")
    y = xf * (g.cast(scale, "float32") if scale.dtype.name != "float32" else scale)
    out = scale.dtype
    if "output_dtype" in a and a["output_dtype"]:
        out = mg_dtype(a["output_dtype"], "output_dtype")
    return g.cast(y, out) if out.name != "float32" else y


def _dequant(cx, q, scale, zp, axis=1):
    """(q - zp) * scale in float32, scale/zp per tensor or along axis."""
    g = cx.g
    qt = g.cast(cx.t(q), "float32")
    r = cx.rank(q)
    if zp is not None:
        qt = qt - g.cast(_axis_param(cx, zp, r, axis), "float32")
    return qt * g.cast(_axis_param(cx, scale, r, axis), "float32")


def _requant(cx, y, scale, zp):
    g = cx.g
    q = g.round(y / g.cast(cx.t(scale), "float32")) + g.cast(cx.t(zp), "float32")
    lo, hi = _QRANGE[cx.dtype(zp).name]
    return g.cast(g.clamp(q, float(lo), float(hi)), cx.dtype(zp))


@op("QLinearMatMul")
def _qlinear_matmul(cx, node, ins, a):
    a_f = _dequant(cx, ins[0], ins[1], ins[2], axis=-1)
    b_f = _dequant(cx, ins[3], ins[4], ins[5], axis=-1)
    return _requant(cx, _matmul(cx, node, [a_f, b_f], {}), ins[6], ins[7])


@op("QLinearConv")
def _qlinear_conv(cx, node, ins, a):
    x_f = _dequant(cx, ins[0], ins[1], ins[2])
    w_f = _dequant(cx, ins[3], ins[4], ins[5], axis=0)
    y = _conv(cx, node, [x_f, w_f], a)
    if len(ins) > 8 and ins[8] is not None:  # int32 bias in units of x_scale * w_scale
        g = cx.g
        bs = g.cast(cx.t(ins[1]), "float32") * g.reshape(g.cast(cx.t(ins[4]), "float32"), [-1])
        y = y + g.reshape(g.cast(cx.t(ins[8]), "float32") * bs, [-1] + [1] * (cx.rank(ins[0]) - 2))
    return _requant(cx, y, ins[6], ins[7])


@op("ConvInteger")
def _conv_integer(cx, node, ins, a):
    g = cx.g
    x = g.cast(cx.t(ins[0]), "int32")
    w = g.cast(cx.t(ins[1]), "int32")
    if len(ins) > 2 and ins[2] is not None:
        x = x - g.cast(cx.t(ins[2]), "int32")
    if len(ins) > 3 and ins[3] is not None:
        w = w - g.cast(_axis_param(cx, ins[3], w.ndim, 0), "int32")
    # exact in float64 (products of 8-bit values), then int32
    y = _conv(cx, node, [g.cast(x, "float64"), g.cast(w, "float64")], a)
    return g.cast(y, "int32")


@op("DynamicQuantizeLinear")
def _dyn_quant(cx, node, ins, a):
    x = cx.t(ins[0])
    g = cx.g
    mx = g.maximum(g.reduction_maximum(x, keep_dims=False), 0.0)
    mn = g.minimum(g.reduction_minimum(x, keep_dims=False), 0.0)
    scale = (mx - mn) / 255.0
    zp = g.cast(g.clamp(g.round(g.negative(mn) / scale), 0.0, 255.0), "uint8")
    y = g.cast(g.clamp(g.round(x / scale) + g.cast(zp, "float32"), 0.0, 255.0), "uint8")
    return [y, scale, zp]


# ---------------------------------------------------------------- linear algebra and sampling


@op("Det", fold=False)
def _det(cx, node, ins, a):
    return cx.g.determinant(cx.t(ins[0]))


_GRID_MODES = {"bilinear": "bilinear", "linear": "bilinear", "nearest": "nearest"}


@op("GridSample", fold=False)
def _grid_sample(cx, node, ins, a):
    x, grid = cx.t(ins[0]), cx.t(ins[1])
    mode = a.get("mode", "bilinear" if cx.opset < 20 else "linear")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    pad = a.get("padding_mode", "zeros")
    pad = pad.decode() if isinstance(pad, bytes) else pad
    if mode not in _GRID_MODES:
        cx.unsupported(f"mode {mode!r} is not supported (bilinear/linear and nearest are)")
    if x.ndim != 4:
        cx.unsupported(f"only 2-D sampling (rank-4 input) is supported, got rank {x.ndim}")
    return cx.g.sample_grid(x, grid, mode=_GRID_MODES[mode], padding_mode=pad,
                            align_corners=bool(a.get("align_corners", 0)))


# ---------------------------------------------------------------- control flow and recurrent nets

from ._control import register as _register_control  # noqa: E402

_register_control(op)

for _name, _why in {
    "Attention": "scaled dot-product attention is not in the op library yet",
    "RotaryEmbedding": "not in the op library yet",
    "GRU": None, "LSTM": None, "RNN": None,
    "NonMaxSuppression": "not in the op library yet",
    "AffineGrid": "grid sampling is not in the op library yet",
    "DFT": "FFT and complex numbers are not in the op library yet",
    "STFT": "FFT and complex numbers are not in the op library yet",
    "MelWeightMatrix": "not supported", "HannWindow": "not supported", "HammingWindow": "not supported",
    "BlackmanWindow": "not supported",
    "RoiAlign": "not in the op library yet", "MaxRoiPool": "not in the op library yet",
    "MaxUnpool": "not in the op library yet", "Col2Im": "not in the op library yet",
    "DeformConv": "not in the op library yet",
    "Unique": "not in the op library yet",
    "StringNormalizer": "strings are not supported", "StringConcat": "strings are not supported",
    "StringSplit": "strings are not supported", "RegexFullMatch": "strings are not supported",
    "TfIdfVectorizer": "strings are not supported",
    "RandomNormal": "ONNX random ops: not supported (use the graph's own random ops)",
    "RandomUniform": "ONNX random ops: not supported", "RandomNormalLike": "ONNX random ops: not supported",
    "RandomUniformLike": "ONNX random ops: not supported", "Multinomial": "ONNX random ops: not supported",
    "Bernoulli": "ONNX random ops: not supported",
    "SequenceConstruct": "sequence types are not supported", "SequenceAt": "sequence types are not supported",
    "SequenceEmpty": "sequence types are not supported", "SequenceInsert": "sequence types are not supported",
    "SequenceErase": "sequence types are not supported", "SequenceLength": "sequence types are not supported",
    "SplitToSequence": "sequence types are not supported", "ConcatFromSequence": "sequence types are not supported",
    "SequenceMap": "sequence types are not supported",
    "Optional": "optional types are not supported", "OptionalGetElement": "optional types are not supported",
    "OptionalHasElement": "optional types are not supported",
    "ImageDecoder": "not supported", "CenterCropPad": "not supported",
    "NegativeLogLikelihoodLoss": "not supported yet", "SoftmaxCrossEntropyLoss": "not supported yet",
    "TensorScatter": "not supported yet", "Upsample": "deprecated; not supported",
    "Scatter": "deprecated; use ScatterElements", "Momentum": "training ops are not supported",
    "Adagrad": "training ops are not supported", "Adam": "training ops are not supported",
    "Gradient": "training ops are not supported",
}.items():
    if _name not in HANDLERS and _why:
        UNSUPPORTED[_name] = _why
