"""ONNX import: load an ONNX model into an ordinary, differentiable mpsgraph Graph.

    import mpsgraph as mg
    model = mg.onnx.load("model.onnx")                  # path, bytes or onnx.ModelProto
    out = model.run({"input": x})                        # {output name: numpy array}
    g, y = model.graph, model.outputs["logits"]          # use with every graph method

`onnx` is an optional dependency (pip install "mpsgraph[onnx]"); it is imported when a model is
loaded. docs/onnx.md lists the operators and what each maps to."""
from ._errors import OnnxImportError, OnnxTypeError, UnsupportedOperatorError, UnsupportedTypeError
from ._model import OnnxModel, load, MIN_OPSET


def supported_operators(expanded=True):
    """Sorted op types of the default ONNX domain that the importer handles: those with a handler
    of their own and (expanded=True; needs onnx) those imported through their ONNX function body."""
    from ._ops import HANDLERS
    ops = set(HANDLERS)
    if expanded:
        from ._functions import function_operators
        from ._model import _onnx
        ops |= set(function_operators(_onnx()))
    return sorted(ops)


def unsupported_operators():
    """{op type: reason} for the default-domain operators the importer refuses."""
    from ._ops import UNSUPPORTED
    from ._functions import has_function
    from ._model import _onnx
    onnx = _onnx()
    newest = onnx.defs.onnx_opset_version()
    return {k: v for k, v in UNSUPPORTED.items() if not has_function(onnx, k, newest)}


__all__ = ["load", "OnnxModel", "OnnxImportError", "OnnxTypeError", "UnsupportedOperatorError", "UnsupportedTypeError",
           "supported_operators", "unsupported_operators", "MIN_OPSET"]
