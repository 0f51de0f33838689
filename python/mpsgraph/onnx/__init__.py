"""ONNX import: load an ONNX model into an ordinary, differentiable mpsgraph Graph.

    import mpsgraph as mg
    model = mg.onnx.load("model.onnx")                  # path, bytes or onnx.ModelProto
    out = model.run({"input": x})                        # {output name: numpy array}
    g, y = model.graph, model.outputs["logits"]          # use with every graph method

`onnx` is an optional dependency (pip install "mpsgraph[onnx]"); it is imported when a model is
loaded. docs/onnx.md lists the operators and what each maps to."""
from ._errors import OnnxImportError, OnnxTypeError, UnsupportedOperatorError, UnsupportedTypeError
from ._model import OnnxModel, load, MIN_OPSET


def supported_operators():
    """Sorted op types of the default ONNX domain that the importer handles."""
    from ._ops import HANDLERS
    return sorted(HANDLERS)


def unsupported_operators():
    """{op type: reason} for the default-domain operators the importer refuses."""
    from ._ops import UNSUPPORTED
    return dict(UNSUPPORTED)


__all__ = ["load", "OnnxModel", "OnnxImportError", "OnnxTypeError", "UnsupportedOperatorError", "UnsupportedTypeError",
           "supported_operators", "unsupported_operators", "MIN_OPSET"]
