"""Errors raised by the ONNX importer: GraphError subclasses that name the node."""
from .._graph import GraphValueError, GraphTypeError


class OnnxImportError(GraphValueError):
    """A model that cannot be imported: malformed, inconsistent, or using what is not supported."""


class OnnxTypeError(OnnxImportError, GraphTypeError):
    """A dtype the model declares that does not match, or that mpsgraph has no equivalent for."""


class UnsupportedTypeError(OnnxTypeError, NotImplementedError):
    """An element type (string, complex, 8/4/2-bit floats and integers) mpsgraph has no dtype for."""


class UnsupportedOperatorError(OnnxImportError, NotImplementedError):
    """Operators (or opset versions, or attribute values) the importer does not handle.

    `unsupported` lists every one found, as (op_type, domain, reason, node names)."""

    def __init__(self, message, unsupported=()):
        super().__init__(message)
        self.unsupported = list(unsupported)


def node_label(node):
    """'name' (OpType) for messages; nodes without a name are labelled by their first output."""
    name = node.name or (f"output '{node.output[0]}'" if len(node.output) and node.output[0] else "unnamed")
    return f"node '{name}' ({node.op_type})" if node.name else f"node {name} ({node.op_type})"
