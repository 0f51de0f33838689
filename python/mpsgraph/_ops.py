"""Graph op methods generated from the C++ op registry: signature, docstring and argument
normalisation (axes, shapes, dtypes, scalars) come from each op's schema."""
import inspect
import numbers

import numpy as np

from . import _core
from ._dtypes import as_dtype, is_integer, bool_
from ._graph import Graph, Tensor, GraphTypeError, GraphValueError, as_tensor_data, as_int

SCHEMAS = {s["name"]: s for s in _core.op_schemas()}
OP_METHODS = set()
_MISSING = object()


def _attr_value(op, attr, value):
    kind = attr["kind"]
    name = attr["name"]
    try:
        if kind in ("axes", "ints"):
            if isinstance(value, numbers.Integral):
                return [as_int(value, op, name)]
            return [as_int(a, op, f"each entry of '{name}'") for a in value]
        if kind == "floats":
            if isinstance(value, numbers.Real):
                return [float(value)]
            return [float(a) for a in value]
        if kind == "shape":
            if isinstance(value, numbers.Integral):
                return [as_int(value, op, name)]
            return [None if d is None else as_int(d, op, f"each dim of '{name}'") for d in value]
        if kind == "dtype":
            return as_dtype(value, op)
        if kind == "tensor":
            return as_tensor_data(value)
        if kind == "int":
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise TypeError
            return int(value)
        if kind == "float":
            if not isinstance(value, numbers.Real):
                raise TypeError
            return float(value)
        if kind == "bool":
            if not isinstance(value, (bool, np.bool_)):
                raise TypeError
            return bool(value)
        if kind == "str":
            if not isinstance(value, str):
                raise TypeError
            return value
    except GraphTypeError:
        raise
    except (TypeError, ValueError):
        raise GraphTypeError(f"[{op}] attribute '{name}' must be {kind}, got {value!r}") from None
    return value


def _scalar_constant(g, op, value, ref):
    """A Python/numpy scalar takes the dtype of the op's other tensor operand."""
    if ref is None:
        return g.constant(value)
    if isinstance(value, np.ndarray) and value.ndim > 0:
        return g.constant(value)  # arrays keep their own dtype
    v = value.item() if isinstance(value, np.generic) else value
    if is_integer(ref):
        if isinstance(v, float):
            if not float(v).is_integer():
                raise GraphTypeError(f"[{op}] Python float {v!r} cannot take the dtype {ref.name} of the other "
                                     f"operand; use a float tensor or cast")
            v = int(v)
        info = np.iinfo(np.dtype(ref.name))
        if isinstance(v, numbers.Integral) and not (info.min <= v <= info.max):
            raise GraphValueError(f"[{op}] Python int {v} is out of range for {ref.name}")
    if isinstance(v, complex) and ref.name not in ("complex64", "complex128"):
        raise GraphTypeError(f"[{op}] complex value {v!r} cannot take the dtype {ref.name} of the other operand; "
                             f"make that operand complex (g.complex or cast)")
    if ref == bool_ and not isinstance(v, (bool, np.bool_)) and v not in (0, 1):
        raise GraphTypeError(f"[{op}] value {v!r} cannot take the dtype bool of the other operand")
    return g.constant(v, dtype=ref)


def _make_method(schema):
    opname = schema["name"]
    multi_output = schema["multi_output"]
    inputs = schema["inputs"]
    attrs = schema["attrs"]
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    seen_optional = False
    for iname, variadic, optional in inputs:
        # inputs after an optional one (adam's gradient) get a None default, checked in C++
        seen_optional = seen_optional or optional
        params.append(inspect.Parameter(iname, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                        default=None if seen_optional else inspect.Parameter.empty))
    after_optional = {n for i, (n, _, _) in enumerate(inputs) if any(o for _, _, o in inputs[:i])}
    for a in attrs:
        default = inspect.Parameter.empty if a["required"] and not seen_optional else a["default"]
        params.append(inspect.Parameter(a["name"], inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default))
    params.append(inspect.Parameter("name", inspect.Parameter.KEYWORD_ONLY, default=None))
    sig = inspect.Signature(params)
    # scalars take their dtype from a data input, never from an index or a predicate
    ref_inputs = [n for (n, _, _), role in zip(inputs, schema["input_roles"]) if role in ("data", "shape_only")]

    def method(self, *args, **kwargs):
        try:
            bound = sig.bind(self, *args, **kwargs)
        except TypeError as e:
            raise GraphTypeError(f"[{opname}] {e}") from None
        b = bound.arguments
        # reference dtype for scalars: the first tensor among the value inputs
        ref = None
        for n, variadic, _ in inputs:
            vals = b.get(n, ())
            vals = list(vals) if variadic else [vals]
            for v in vals:
                if isinstance(v, Tensor) and ref is None and n in ref_inputs:
                    ref = v.dtype
        tensors = []
        for n, variadic, optional in inputs:
            vals = b.get(n)
            if (optional or n in after_optional) and vals is None:
                tensors.append(None)
                continue
            if variadic:
                if isinstance(vals, Tensor) or not hasattr(vals, "__iter__"):
                    raise GraphTypeError(f"[{opname}] '{n}' must be a list of tensors")
                vals = list(vals)
            else:
                vals = [vals]
            for v in vals:
                if isinstance(v, Tensor):
                    self._check_tensor(v, opname, f"input '{n}'")
                else:
                    if v is None:
                        raise GraphTypeError(f"[{opname}] input '{n}' is None")
                    v = _scalar_constant(self, opname, v, ref)
                tensors.append(v)
        attr_values = {}
        for a in attrs:
            v = b.get(a["name"], _MISSING)
            if v is _MISSING or v is None:
                continue
            attr_values[a["name"]] = _attr_value(opname, a, v)
        outs = self._add(opname, tensors, attr_values, b.get("name"))
        if len(outs) == 1 and not multi_output:
            return outs[0]
        if not outs:
            from ._graph import Operation
            return Operation(self, len(self._g) - 1)
        return tuple(outs)

    method.__name__ = opname
    method.__qualname__ = "Graph." + opname
    method.__signature__ = sig
    doc = schema["doc"]
    adocs = [f"    {a['name']} ({a['kind']}): {a['doc']}" for a in attrs if a["doc"]]
    if adocs:
        doc += "\n\nAttributes:\n" + "\n".join(adocs)
    if schema["aliases"]:
        doc += "\n\nAliases: " + ", ".join(schema["aliases"])
    method.__doc__ = doc
    return method


def _install():
    for name, schema in SCHEMAS.items():
        if not schema["python_method"]:
            continue
        m = _make_method(schema)
        for n in [name] + list(schema["aliases"]):
            if n in Graph.__dict__ and n not in OP_METHODS:
                continue  # hand-written sugar with the same name wins
            setattr(Graph, n, m)
            OP_METHODS.add(n)


_install()


def op_names():
    """Names of all op methods (registry ops and their aliases)."""
    return sorted(OP_METHODS)
