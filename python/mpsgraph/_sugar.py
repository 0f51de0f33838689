"""numpy-style names whose defaults differ from MPSGraph's (hand-written sugar).

Reductions: MPSGraph's reduction_* ops keep the reduced axes (keep_dims=True by default);
the numpy-named methods sum/prod/max/min/var/all/any drop them (keepdims=False), as numpy
does, and accept numpy's spelling (axis, keepdims) as well as MPSGraph's (axes, keep_dims).
`mean` and `logsumexp` are registry ops themselves and keep MPSGraph's defaults.

argmax/argmin: numpy semantics; axis=None reduces the flattened tensor; int32 indices."""
from ._graph import Graph, GraphTypeError

_REDUCTIONS = {
    "sum": "reduction_sum", "prod": "reduction_product", "max": "reduction_maximum", "min": "reduction_minimum",
    "mean": "mean", "var": "variance", "all": "reduction_and", "any": "reduction_or", "logsumexp": "logsumexp",
}


def _numpy_reduction(op, np_name, mg_name):
    # `op` is the generated registry method (captured: `mean` and `logsumexp` share the name)
    def method(self, x, axis=None, keepdims=None, *, axes=None, keep_dims=None, name=None):
        if axis is not None and axes is not None:
            raise GraphTypeError(f"[{np_name}] give axis or axes, not both")
        if keepdims is not None and keep_dims is not None:
            raise GraphTypeError(f"[{np_name}] give keepdims or keep_dims, not both")
        ax = axis if axis is not None else axes
        kd = keepdims if keepdims is not None else keep_dims
        return op(self, x, axes=ax, keep_dims=bool(kd) if kd is not None else False, name=name)

    method.__name__ = np_name
    method.__qualname__ = "Graph." + np_name
    method.__doc__ = (f"numpy-style {np_name}(x, axis=None, keepdims=False): Graph.{mg_name} with the reduced axes "
                      f"dropped by default (axis=None reduces all axes).")
    return method


def _numpy_arg(op, np_name, mg_name):
    def method(self, x, axis=None, keepdims=False, *, dtype=None, name=None):
        kw = {} if dtype is None else {"dtype": dtype}
        if axis is None:
            rank = x.ndim if hasattr(x, "ndim") else None
            flat = self.reshape(x, (-1,))
            r = op(self, flat, axis=0, keep_dims=False, name=None if keepdims else name, **kw)
            if keepdims and rank is not None:
                r = self.reshape(r, (1,) * rank, name=name)
            return r
        return op(self, x, axis=axis, keep_dims=bool(keepdims), name=name, **kw)

    method.__name__ = np_name
    method.__qualname__ = "Graph." + np_name
    method.__doc__ = (f"numpy-style {np_name}(x, axis=None, keepdims=False): Graph.{mg_name}; axis=None gives the "
                      f"index into the flattened tensor. Indices are int32 (dtype=int64 for 64-bit).")
    return method


def _install():
    from ._ops import SCHEMAS, OP_METHODS
    for np_name, mg_name in _REDUCTIONS.items():
        # a registry op of the same name (mean, logsumexp) keeps its MPSGraph defaults
        if mg_name in SCHEMAS and np_name not in SCHEMAS:
            op = getattr(Graph, mg_name)
            setattr(Graph, np_name, _numpy_reduction(op, np_name, mg_name))
            OP_METHODS.add(np_name)
    for np_name, mg_name in (("argmax", "reduction_arg_maximum"), ("argmin", "reduction_arg_minimum")):
        if mg_name in SCHEMAS:
            setattr(Graph, np_name, _numpy_arg(getattr(Graph, mg_name), np_name, mg_name))
            OP_METHODS.add(np_name)


_install()
