"""Operators without a handler of their own that ONNX defines as a function of other operators
(RMSNormalization, SwiGLU, Attention, AffineGrid, window functions, ...): imported by expanding the
function body the onnx package gives for the node's attributes and input types."""
import numpy as np

from .. import _dtypes


def _schema(onnx, op_type, opset):
    try:
        return onnx.defs.get_schema(op_type, opset, "")
    except Exception:
        return None


def has_function(onnx, op_type, opset):
    if op_type in RANDOM:
        return False
    s = _schema(onnx, op_type, opset)
    return s is not None and (s.has_function or s.has_context_dependent_function)


def _type_proto(onnx, cx, v):
    dt = np.dtype(_dtypes.to_numpy_dtype(cx.dtype(v))) if v is not None else None
    if v is None:
        return onnx.TypeProto()
    elem = onnx.helper.np_dtype_to_tensor_dtype(dt) if dt.name != "bfloat16" else onnx.TensorProto.BFLOAT16
    return onnx.helper.make_tensor_type_proto(elem, [d if d is not None else None for d in cx.shape(v)])


def function_body(onnx, cx, node, ins):
    s = _schema(onnx, node.op_type, cx.opset)
    if s is None:
        return None
    if s.has_function:
        vs = [v for v in s.function_opset_versions if v <= cx.opset] or list(s.function_opset_versions)
        return onnx.FunctionProto.FromString(s.get_function_with_opset_version(max(vs)))
    if s.has_context_dependent_function:
        vs = [v for v in s.context_dependent_function_opset_versions if v <= cx.opset] or \
            list(s.context_dependent_function_opset_versions)
        types = [_type_proto(onnx, cx, v).SerializeToString() for v in ins]
        b = s.get_context_dependent_function_with_opset_version(max(vs), node.SerializeToString(), types)
        if not b:
            return None
        return onnx.FunctionProto.FromString(b)
    return None


def expand(cx, node, ins, a):
    """Imports node through its ONNX function body; returns the output values."""
    from ._model import Context, Env
    imp = cx.importer
    onnx = imp.onnx
    fb = function_body(onnx, cx, node, ins)
    if fb is None:
        cx.unsupported("no handler and no function body to expand")
    attrs = {at.name: at for at in node.attribute}
    defaults = {at.name: at for at in fb.attribute_proto}
    schema = _schema(onnx, node.op_type, cx.opset)
    for name, spec in (schema.attributes.items() if schema is not None else ()):
        dv = spec.default_value
        if name not in defaults and dv is not None and dv.type:
            defaults[name] = dv
    nodes = []
    for n in fb.node:
        n2 = onnx.NodeProto()
        n2.CopyFrom(n)
        del n2.attribute[:]
        for at in n.attribute:
            if at.ref_attr_name:
                src = attrs.get(at.ref_attr_name, defaults.get(at.ref_attr_name))
                if src is None:
                    continue  # unset: the body operator's own default applies
                at2 = onnx.AttributeProto()
                at2.CopyFrom(src)
                at2.name = at.name
                n2.attribute.append(at2)
            else:
                n2.attribute.append(at)
        nodes.append(n2)
    env = Env()
    for formal, v in zip(fb.input, ins):
        if formal and v is not None:
            env[formal] = v
    opset = next((int(o.version) for o in fb.opset_import if o.domain in ("", "ai.onnx")), cx.opset)
    sub = Context(imp, cx.g, opset)
    gp = onnx.helper.make_graph(nodes, f"{node.op_type}_function", [], [])
    imp.run_graph(gp, env, sub)
    outs = []
    for want, o in zip(node.output, fb.output):
        v = env.get(o) if want else None
        if v is None and want:
            cx.fail(f"its function body does not produce '{o}'")
        outs.append(v)
    return outs


def function_operators(onnx):
    """Op types of the default domain that ONNX defines as functions (at the newest opset)."""
    newest = onnx.defs.onnx_opset_version()
    return sorted({s.name for s in onnx.defs.get_all_schemas() if s.domain == "" and not s.deprecated
                   and has_function(onnx, s.name, newest) and s.name not in RANDOM})


RANDOM = {"Bernoulli"}  # function bodies that draw ONNX random numbers (not supported)
