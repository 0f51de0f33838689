"""numpy-style names whose defaults differ from MPSGraph's (hand-written sugar).

Reductions: MPSGraph's reduction_* ops keep the reduced axes (keep_dims=True by default);
the numpy-named methods sum/mean/max/... drop them (keepdims=False), as numpy does."""
from ._graph import Graph

_REDUCTIONS = {
    "sum": "reduction_sum", "prod": "reduction_product", "max": "reduction_maximum", "min": "reduction_minimum",
    "mean": "mean", "var": "variance", "all": "reduction_and", "any": "reduction_or", "logsumexp": "logsumexp",
}


def _numpy_reduction(mg_name, np_name):
    def method(self, x, axis=None, keepdims=False, name=None):
        return getattr(self, mg_name)(x, axes=axis, keep_dims=keepdims, name=name)

    method.__name__ = np_name
    method.__doc__ = f"numpy-style {np_name}: Graph.{mg_name} with keepdims=False by default."
    return method


def _install():
    from ._ops import SCHEMAS, OP_METHODS
    for np_name, mg_name in _REDUCTIONS.items():
        if mg_name in SCHEMAS:
            setattr(Graph, np_name, _numpy_reduction(mg_name, np_name))
            OP_METHODS.add(np_name)
    if "reduction_argmaximum" in SCHEMAS or "argmax" in SCHEMAS:
        pass


_install()
