"""ONNX model -> mpsgraph Graph: the loader, the import context handlers see, and the model object.

Values of the ONNX graph are held as one of
  * numpy arrays: known at import time (initializers, Constant, Shape of static dims and anything
    computed only from them; such nodes are folded here, so Shape -> Gather -> Concat -> Reshape
    chains give static shapes),
  * Sym: a 1-D int64 shape value some of whose elements are dims known only at run time (Shape of a
    tensor with unknown dims, and the Gather/Slice/Concat/Unsqueeze/Cast chains built on it), so a
    Reshape or Expand fed by it can still be built,
  * Tensors of the graph (everything that depends on inputs or trainable variables).
"""
import os

import numpy as np

from .. import _dtypes
from .._graph import Graph, Tensor
from ._functions import has_function
from ._errors import OnnxImportError, OnnxTypeError, UnsupportedOperatorError, UnsupportedTypeError, node_label

# ONNX TensorProto data types -> mpsgraph dtypes (the others have no equivalent here)
_ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
                10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 16: "bfloat16"}
_ONNX_DTYPE_NAMES = {0: "UNDEFINED", 8: "STRING", 14: "COMPLEX64", 15: "COMPLEX128", 17: "FLOAT8E4M3FN",
                     18: "FLOAT8E4M3FNUZ", 19: "FLOAT8E5M2", 20: "FLOAT8E5M2FNUZ", 21: "UINT4", 22: "INT4",
                     23: "FLOAT4E2M1", 24: "FLOAT8E8M0", 25: "UINT2", 26: "INT2"}
MIN_OPSET = 13
NEEDS_VALUE = "must be known when the model is imported"  # older models: convert with onnx.version_converter first


def _contig(a):
    """A C-contiguous copy-if-needed that keeps 0-d arrays 0-d (np.ascontiguousarray makes them 1-d)."""
    return np.array(a, order="C", copy=not a.flags.c_contiguous) if isinstance(a, np.ndarray) else np.asarray(a)


def _onnx():
    try:
        import onnx
    except ImportError:
        raise ImportError("mpsgraph.onnx needs the onnx package: pip install \"mpsgraph[onnx]\" "
                          "(or pip install onnx)") from None
    return onnx


def mg_dtype(elem_type, what):
    """mpsgraph dtype of an ONNX element type; OnnxTypeError naming `what` when there is none."""
    name = _ONNX_DTYPES.get(int(elem_type))
    if name is None:
        kind = _ONNX_DTYPE_NAMES.get(int(elem_type), elem_type)
        raise UnsupportedTypeError(f"[onnx] {what} has element type {kind}, "
                            f"which mpsgraph does not support")
    return _dtypes.as_dtype(name)


def np_dtype(elem_type, what):
    return _dtypes.to_numpy_dtype(mg_dtype(elem_type, what))


def _schema_exists(onnx, op_type, opset):
    try:
        onnx.defs.get_schema(op_type, opset, "")
        return True
    except Exception:
        return False


class Sym:
    """An int64 shape value (1-D, or a 0-d scalar with scalar=True) whose elements are known at
    import (ints) or only at run time (DimRef: a dim of a tensor, Prod: a product of such dims
    and an int). `tensor` builds it in the graph when an op needs it as a tensor."""

    __slots__ = ("elems", "scalar", "_tensor")

    def __init__(self, elems, scalar=False, tensor=None):
        self.elems = list(elems)
        self.scalar = scalar
        self._tensor = tensor

    def known(self):
        return all(isinstance(e, int) for e in self.elems)

    def __repr__(self):
        return f"Sym({self.elems}{', scalar' if self.scalar else ''})"


class DimRef:
    """Dim `axis` of `tensor`, known at run time."""
    __slots__ = ("tensor", "axis")

    def __init__(self, tensor, axis):
        self.tensor, self.axis = tensor, axis

    def __eq__(self, o):
        return isinstance(o, DimRef) and o.tensor is self.tensor and o.axis == self.axis

    def __hash__(self):
        return hash((id(self.tensor), self.axis))

    def __repr__(self):
        return f"{self.tensor.name}.shape[{self.axis}]"


class Prod:
    """coef * the product of run-time dims (DimRefs)."""
    __slots__ = ("coef", "dims")

    def __init__(self, coef, dims):
        self.coef, self.dims = int(coef), tuple(dims)

    def __repr__(self):
        return "*".join([str(self.coef)] + [repr(d) for d in self.dims])


def as_prod(e):
    if isinstance(e, Prod):
        return e
    if isinstance(e, DimRef):
        return Prod(1, (e,))
    if isinstance(e, int):
        return Prod(e, ())
    return None


def simplify(p):
    """A Prod as an int (no run-time dims left; static dims folded), a DimRef, or the Prod."""
    coef, dims = p.coef, []
    for d in p.dims:
        v = d.tensor.shape[d.axis]
        if v is None:
            dims.append(d)
        else:
            coef *= v
    if not dims:
        return coef
    if coef == 1 and len(dims) == 1:
        return dims[0]
    return Prod(coef, dims)


class NodeError(Exception):
    """Raised by handlers (cx.fail / cx.unsupported); the importer adds the node's label."""

    def __init__(self, msg, kind=OnnxImportError):
        super().__init__(msg)
        self.kind = kind


class Context:
    """What a handler sees: the graph, the node's opset, helpers to turn values into tensors or
    import-time constants, and fail()/unsupported() that name the node."""

    def __init__(self, importer, g, opset):
        self.importer = importer
        self.g = g
        self.opset = opset
        self.node = None
        self.env = None
        self._shape_cache = {}

    # -- errors --
    def fail(self, msg, kind=OnnxImportError):
        raise NodeError(msg, kind)

    def unsupported(self, msg):
        raise NodeError(msg, UnsupportedOperatorError)

    # -- values --
    def shape_hint(self):
        """Advice when run-time dims are the cause: fix them with load(..., input_shapes=...)."""
        dyn = [n for n, t in (self.importer.placeholders or {}).items() if any(d is None for d in t.shape)]
        return f" (the inputs {dyn} have unknown dims: load(..., input_shapes={{name: shape}}) fixes them)" \
            if dyn else ""

    @staticmethod
    def is_const(v):
        return isinstance(v, np.ndarray)

    def t(self, v, dtype=None):
        """The value as a Tensor of the graph (constants and Sym values are built)."""
        if isinstance(v, Tensor):
            return v
        if isinstance(v, Sym):
            if v._tensor is None or v._tensor.graph is not self.g:
                t = self._build_sym(v)
                v._tensor = self.g.reshape(t, []) if v.scalar else t
            return v._tensor
        if v is None:
            self.fail("a required input is missing")
        return self.g.constant(np.asarray(v), dtype=dtype)

    def _build_sym(self, s):
        parts = []
        for e in s.elems:
            if isinstance(e, DimRef):
                parts.append(self.g.slice(self.shape_tensor(e.tensor), 0, e.axis, 1))
            elif isinstance(e, int):
                parts.append(self.g.constant(np.array([e], np.int64)))
            elif isinstance(e, Prod):
                t = self.g.constant(np.array([e.coef], np.int64))
                for d in e.dims:
                    t = t * self.g.slice(self.shape_tensor(d.tensor), 0, d.axis, 1)
                parts.append(t)
            else:
                self.fail("internal error: a shape element without a value")
        return self.g.concat(parts, axis=0) if len(parts) != 1 else parts[0]

    def shape_tensor(self, t):
        """shape_of(t) as int64 (built once per tensor)."""
        key = id(t)
        hit = self._shape_cache.get(key)
        if hit is None or hit[0] is not t:
            hit = (t, self.g.cast(self.g.shape_of(t), "int64"))
            self._shape_cache[key] = hit
        return hit[1]

    def c(self, v, what="input"):
        """The value as a numpy array known at import time; NotImplemented (naming what) if it is not."""
        if isinstance(v, np.ndarray):
            return v
        if isinstance(v, Sym) and v.known():
            return np.array(v.elems[0] if v.scalar else v.elems, np.int64)
        if v is None:
            return None
        self.unsupported(f"{what} {NEEDS_VALUE} (a constant, an initializer or computed from static shapes); "
                         f"here it is computed at run time{self.shape_hint()}")

    def ints(self, v, what="input"):
        a = self.c(v, what)
        return None if a is None else [int(x) for x in np.asarray(a).reshape(-1)]

    @staticmethod
    def shape(v):
        if isinstance(v, np.ndarray):
            return tuple(v.shape)
        if isinstance(v, Sym):
            return () if v.scalar else (len(v.elems),)
        return v.shape

    @staticmethod
    def dtype(v):
        if isinstance(v, np.ndarray):
            return _dtypes.as_dtype(v.dtype)
        if isinstance(v, Sym):
            return _dtypes.as_dtype("int64")
        return v.dtype

    def rank(self, v):
        return len(self.shape(v))

    def axis(self, axis, rank, what="axis"):
        a = int(axis)
        if not -rank <= a < max(rank, 1):
            self.fail(f"{what} {a} is out of range for rank {rank}")
        return a + rank if a < 0 else a


class Importer:
    """Walks an ONNX GraphProto (and its sub-graphs) into an mpsgraph Graph."""

    def __init__(self, model, g, trainable, base_dir):
        from ._ops import HANDLERS, FOLD
        self.onnx = _onnx()
        self.model = model
        self.g = g
        self.trainable = trainable
        self.base_dir = base_dir
        self.handlers = HANDLERS
        self.fold = FOLD
        self.opset = self._opset(model)
        self.variables = {}
        self.placeholders = {}

    def _opset(self, model):
        ver = None
        for imp in model.opset_import:
            if imp.domain in ("", "ai.onnx"):
                ver = int(imp.version)
        if ver is None:
            if any(n.domain in ("", "ai.onnx") for n in model.graph.node):
                raise OnnxImportError("[onnx] the model imports no version of the default ONNX domain")
            ver = MIN_OPSET
        newest = self.onnx.defs.onnx_opset_version()
        if ver < MIN_OPSET:
            raise UnsupportedOperatorError(
                f"[onnx] the model uses opset {ver}; mpsgraph imports opset {MIN_OPSET} to {newest}. Convert it "
                f"first: onnx.version_converter.convert_version(model, {MIN_OPSET})",
                [("opset", "", f"version {ver}", [])])
        if ver > newest:
            raise UnsupportedOperatorError(
                f"[onnx] the model uses opset {ver}, newer than the installed onnx package knows ({newest})",
                [("opset", "", f"version {ver}", [])])
        return ver

    # -- whole model --
    def check_supported(self, graph):
        """Every node (sub-graphs included) whose op type has no handler, in one error."""
        bad = {}

        def walk(gp):
            for n in gp.node:
                if n.domain not in ("", "ai.onnx"):
                    key = (n.op_type, n.domain, f"custom domain '{n.domain}' is not supported")
                elif n.op_type not in self.handlers and not has_function(self.onnx, n.op_type, self.opset):
                    from ._ops import UNSUPPORTED
                    why = UNSUPPORTED.get(n.op_type, "not supported by the importer")
                    if _schema_exists(self.onnx, n.op_type, self.opset) is False:
                        why = f"not an operator of ONNX opset {self.opset}"
                    key = (n.op_type, "", why)
                else:
                    key = None
                if key is not None:
                    bad.setdefault(key, []).append(n.name or (n.output[0] if n.output else ""))
                for a in n.attribute:
                    if a.type == self.onnx.AttributeProto.GRAPH:
                        walk(a.g)
                    elif a.type == self.onnx.AttributeProto.GRAPHS:
                        for sg in a.graphs:
                            walk(sg)

        walk(graph)
        if bad:
            items = [(op, dom, why, names) for (op, dom, why), names in bad.items()]
            lines = [f"  {op}{' (' + dom + ')' if dom else ''}: {why}; node(s) {', '.join(repr(x) for x in names[:5])}"
                     + (f" and {len(names) - 5} more" if len(names) > 5 else "") for op, dom, why, names in items]
            raise UnsupportedOperatorError(
                f"[onnx] the model uses {len(items)} unsupported operator(s):\n" + "\n".join(lines), items)

    def initializer(self, t):
        what = f"initializer '{t.name}'"
        mg_dtype(t.data_type, what)
        try:
            arr = self.onnx.numpy_helper.to_array(t, self.base_dir or "")
        except FileNotFoundError as e:
            raise OnnxImportError(f"[onnx] {what}: its external data file is missing ({e}); external data is "
                                  f"read from beside the model file") from None
        except Exception as e:  # malformed raw data, wrong sizes
            raise OnnxImportError(f"[onnx] {what} cannot be read: {e}") from None
        arr = np.asarray(arr)
        want = np_dtype(t.data_type, what)
        if arr.dtype != want:
            arr = arr.astype(want)
        return _contig(arr)

    def value_type(self, vi, what):
        """(shape with None for symbolic/unknown dims, mpsgraph dtype) of a ValueInfoProto."""
        tt = vi.type
        if tt.WhichOneof("value") != "tensor_type":
            raise UnsupportedTypeError(f"[onnx] {what} '{vi.name}' is not a tensor ({tt.WhichOneof('value')} types are "
                                f"not supported)")
        dtype = mg_dtype(tt.tensor_type.elem_type, f"{what} '{vi.name}'")
        if not tt.tensor_type.HasField("shape"):
            raise OnnxImportError(f"[onnx] {what} '{vi.name}' has no shape (unranked inputs are not supported)")
        shape = tuple(int(d.dim_value) if d.HasField("dim_value") and d.dim_value >= 0 else None
                      for d in tt.tensor_type.shape.dim)
        return shape, dtype

    def run_graph(self, gp, env, cx):
        """Imports the nodes of gp into env (name -> value). Checks undefined inputs and cycles."""
        order = self.topo_order(gp, env)
        cx.env = env
        for node in order:
            self.import_node(node, env, cx)

    def topo_order(self, gp, env):
        """Nodes in an order where each input is defined first (ONNX requires topological order,
        but exporters do not always comply); undefined inputs and cycles are errors naming the node."""
        defined = env.all_names()
        nodes = list(gp.node)
        producers = {}
        for i, n in enumerate(nodes):
            for o in n.output:
                if o:
                    if o in producers or dict.__contains__(env, o):
                        raise OnnxImportError(f"[onnx] {node_label(n)}: output '{o}' is defined more than once")
                    producers[o] = i
        needs = []
        for n in nodes:
            deps = set()
            for name in list(n.input) + self.implicit_inputs(n):
                if not name:
                    continue
                if name in producers:
                    deps.add(producers[name])
                elif name not in defined:
                    raise OnnxImportError(f"[onnx] {node_label(n)}: input '{name}' is not defined (no graph input, "
                                          f"initializer or node output has that name)")
            needs.append(deps)
        out, state = [], [0] * len(nodes)  # 0 new, 1 in progress, 2 done
        for start in range(len(nodes)):
            if state[start]:
                continue
            stack = [(start, iter(sorted(needs[start])))]
            state[start] = 1
            while stack:
                i, it = stack[-1]
                nxt = next(it, None)
                if nxt is None:
                    stack.pop()
                    state[i] = 2
                    out.append(nodes[i])
                elif state[nxt] == 1:
                    raise OnnxImportError(f"[onnx] {node_label(nodes[nxt])}: the graph has a cycle through this node")
                elif state[nxt] == 0:
                    state[nxt] = 1
                    stack.append((nxt, iter(sorted(needs[nxt]))))
        return out

    def implicit_inputs(self, node):
        """Names a node's sub-graphs read from the enclosing scope."""
        names = []
        for a in node.attribute:
            gs = [a.g] if a.type == self.onnx.AttributeProto.GRAPH else list(a.graphs)
            for sg in gs:
                local = {i.name for i in sg.input} | {t.name for t in sg.initializer}
                for n in sg.node:
                    local.update(o for o in n.output if o)
                for n in sg.node:
                    for name in list(n.input) + self.implicit_inputs(n):
                        if name and name not in local:
                            names.append(name)
        return names

    def attrs(self, node):
        helper = self.onnx.helper
        out = {}
        for a in node.attribute:
            if a.ref_attr_name:
                raise NodeError(f"attribute '{a.name}' refers to a function attribute ('{a.ref_attr_name}'), which "
                                f"is only valid inside a function", UnsupportedOperatorError)
            try:
                v = helper.get_attribute_value(a)
            except Exception as e:
                raise NodeError(f"attribute '{a.name}' cannot be read: {e}") from None
            if isinstance(v, bytes):
                v = v.decode("utf-8", "replace")
            elif isinstance(v, list) and v and isinstance(v[0], bytes):
                v = [x.decode("utf-8", "replace") for x in v]
            out[a.name] = v
        return out

    def import_node(self, node, env, cx):
        handler = self.handlers.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        if handler is None and node.domain in ("", "ai.onnx") and has_function(self.onnx, node.op_type, cx.opset):
            from ._functions import expand as handler
        if handler is None:  # check_supported ran first; a sub-graph's node may still get here
            raise UnsupportedOperatorError(f"[onnx] {node_label(node)}: operator not supported",
                                           [(node.op_type, node.domain, "not supported", [node.name])])
        ins = [env.get(name) if name else None for name in node.input]
        cx.node = node
        try:
            a = self.attrs(node)
            outs = None
            if ins and all(isinstance(v, np.ndarray) or v is None for v in ins) and any(v is not None for v in ins) \
                    and node.op_type in self.fold:
                outs = self.fold_node(handler, node, ins, a, cx)
            if outs is None:
                outs = handler(cx, node, ins, a)
        except NodeError as e:
            raise e.kind(f"[onnx] {node_label(node)}: {e}") from None
        except OnnxImportError:
            raise
        except (ValueError, TypeError, IndexError, NotImplementedError, OverflowError) as e:
            kind = UnsupportedOperatorError if isinstance(e, NotImplementedError) else OnnxImportError
            msg = str(e)
            raise kind(f"[onnx] {node_label(node)}: {msg}") from None
        if not isinstance(outs, (list, tuple)):
            outs = [outs]
        outs = [np.asarray(v) if isinstance(v, np.generic) else v for v in outs]  # numpy scalars -> 0-d
        for name, v in zip(node.output, outs):
            if name:
                env[name] = v
        missing = [o for o in node.output[len(outs):] if o]
        if missing:
            raise UnsupportedOperatorError(f"[onnx] {node_label(node)}: output(s) {missing} are not supported")

    def fold_node(self, handler, node, ins, a, cx):
        """A node whose inputs are all known at import: compute it now, on a scratch graph."""
        scratch = Context(self, Graph(), cx.opset)
        scratch.node = node
        outs = handler(scratch, node, ins, a)
        single = not isinstance(outs, (list, tuple))
        outs = [outs] if single else list(outs)
        tensors = [o for o in outs if isinstance(o, Tensor)]
        if tensors:
            vals = scratch.g.run({}, tensors)
            outs = [np.array(vals[o].numpy(), copy=True) if isinstance(o, Tensor) else o for o in outs]
        return outs


class Env(dict):
    """name -> value for one (sub-)graph; falls back to the enclosing graph's values."""

    def __init__(self, parent=None):
        super().__init__()
        self.parent = parent

    def get(self, name, default=None):
        if dict.__contains__(self, name):
            return dict.__getitem__(self, name)
        if self.parent is not None:
            return self.parent.get(name, default)
        return default

    def all_names(self):
        ks = set(dict.keys(self))
        if self.parent is not None:
            ks |= self.parent.all_names()
        return ks


def _read_model(source):
    onnx = _onnx()
    base_dir = None
    if isinstance(source, onnx.ModelProto):
        return source, None
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if not os.path.exists(path):
            raise FileNotFoundError(f"[onnx] no such model file: {path!r}")
        base_dir = os.path.dirname(os.path.abspath(path))
        with open(path, "rb") as f:
            data = f.read()
    elif isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
    else:
        raise OnnxTypeError(f"[onnx] load() takes a path, bytes or an onnx.ModelProto, not {type(source).__name__}")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as e:
        raise OnnxImportError(f"[onnx] the data is not a valid ONNX model (protobuf parse failed: "
                              f"{type(e).__name__}: {e})") from None
    if not model.HasField("graph"):
        raise OnnxImportError("[onnx] the data is not a valid ONNX model: it has no graph")
    return model, base_dir


class OnnxModel:
    """An imported ONNX model: an ordinary mpsgraph Graph with the model's inputs as placeholders
    (same names; symbolic dims are None) and its outputs as tensors.

    Use its tensors with every graph method (add a head, g.gradients, optimizers), run it with
    .run({name: array}) or compile it with .compile()."""

    def __init__(self, graph, inputs, outputs, initializers, variables, opset, producer, value_tensors):
        self.graph = graph
        self.inputs = inputs            # {name: placeholder Tensor}
        self.outputs = outputs          # {name: Tensor}
        self.initializers = initializers  # {name: Tensor (constant or variable)}
        self.variables = variables      # {name: Variable} (trainable=True)
        self.opset = opset
        self.producer = producer
        self._values = value_tensors

    @property
    def input_names(self):
        return list(self.inputs)

    @property
    def output_names(self):
        return list(self.outputs)

    def __getitem__(self, name):
        """The tensor of any ONNX value name of the main graph (inputs, outputs, intermediates)."""
        v = self._values.get(name)
        if v is None:
            raise KeyError(f"[onnx] the model has no value named {name!r}")
        if not isinstance(v, Tensor):
            v = self.graph.constant(np.asarray(v.elems if isinstance(v, Sym) and v.known() else v))
            self._values[name] = v
        return v

    def _feeds(self, feeds):
        if isinstance(feeds, (list, tuple)):
            if len(feeds) != len(self.inputs):
                raise OnnxImportError(f"[onnx] run() got {len(feeds)} inputs; the model has {len(self.inputs)} "
                                      f"({', '.join(self.inputs)})")
            feeds = dict(zip(self.inputs, feeds))
        unknown = [k for k in feeds if k not in self.inputs]
        if unknown:
            raise OnnxImportError(f"[onnx] run() got values for {unknown}, which are not inputs of the model "
                                  f"(inputs: {', '.join(self.inputs)})")
        missing = [k for k in self.inputs if k not in feeds]
        if missing:
            raise OnnxImportError(f"[onnx] run() is missing input(s) {missing}")
        out = {}
        for k, v in feeds.items():
            t = self.inputs[k]
            arr = v if hasattr(v, "__dlpack__") and not isinstance(v, np.ndarray) else np.asarray(v)
            if isinstance(arr, np.ndarray):
                want = _dtypes.to_numpy_dtype(t.dtype)
                if arr.dtype != want:
                    raise OnnxTypeError(f"[onnx] input '{k}' must be {t.dtype.name}, got {arr.dtype}")
                if arr.ndim != len(t.shape) or any(d is not None and d != s for d, s in zip(t.shape, arr.shape)):
                    raise OnnxImportError(f"[onnx] input '{k}' must have shape "
                                          f"{tuple('?' if d is None else d for d in t.shape)}, got {arr.shape}")
                arr = _contig(arr)
            out[t] = arr
        return out

    def run(self, feeds, outputs=None, device=None):
        """Runs the model: feeds {input name: array} (or a list in input order); returns
        {output name: numpy array} for `outputs` (names; all outputs when None)."""
        names = list(self.outputs) if outputs is None else list(outputs)
        targets = [self.outputs[n] if n in self.outputs else self[n] for n in names]
        res = self.graph.run(self._feeds(feeds), targets, device=device)
        return {n: res[t].numpy() for n, t in zip(names, targets)}

    def compile(self, device=None, input_shapes=None, outputs=None):
        """An Executable for the model: inputs in input_names order, results in output order.
        input_shapes {name: shape} fixes unknown dims (else they are specialised per run)."""
        from .._graph import ShapedType
        shapes = input_shapes or {}
        feeds = {t: ShapedType(tuple(shapes.get(n, t.shape)), t.dtype) for n, t in self.inputs.items()}
        names = list(self.outputs) if outputs is None else list(outputs)
        return self.graph.compile(feeds, [self.outputs[n] if n in self.outputs else self[n] for n in names],
                                  device=device)

    def __repr__(self):
        def sig(d):
            return ", ".join(f"{n}: {t.dtype.name}{list('?' if x is None else x for x in t.shape)}"
                             for n, t in d.items())
        return f"OnnxModel(opset {self.opset}; inputs {sig(self.inputs)}; outputs {sig(self.outputs)})"


def load(source, graph=None, trainable=False, check=True, input_values=None, input_shapes=None):
    """Imports an ONNX model (a path, bytes or an onnx.ModelProto) into `graph` (a new Graph when
    None) and returns an OnnxModel. Initializers become constants, or variables with
    trainable=True (floating-point ones; integer initializers such as shapes stay constants).
    External-data tensors are read from beside the model file. check=False skips onnx.checker.
    input_values {input name: array} imports those inputs as constants (for inputs, such as axes or
    a shape, that the model needs to know when it is imported)."""
    onnx = _onnx()
    model, base_dir = _read_model(source)
    if check:
        try:
            # a path lets the checker find external data beside the model file
            is_path = isinstance(source, (str, os.PathLike)) and base_dir is not None
            onnx.checker.check_model(os.fspath(source) if is_path else model, full_check=False)
        except onnx.checker.ValidationError as e:
            msg = str(e).strip().splitlines()
            raise OnnxImportError("[onnx] the model is not valid ONNX: " + " ".join(msg[:6])) from None
        except Exception as e:  # the checker itself failing on odd data
            raise OnnxImportError(f"[onnx] the model is not valid ONNX: {type(e).__name__}: {e}") from None
    g = graph if graph is not None else Graph()
    imp = Importer(model, g, trainable, base_dir)
    gp = model.graph
    imp.check_supported(gp)
    env = Env()
    initializers, variables, inputs = {}, {}, {}
    init_names = set()
    for t in gp.initializer:
        arr = imp.initializer(t)
        init_names.add(t.name)
        if trainable and arr.dtype.kind == "f" or trainable and arr.dtype.name == "bfloat16":
            v = g.variable(arr, name=t.name)
            variables[t.name] = v
            initializers[t.name] = v
            env[t.name] = v
        else:
            env[t.name] = arr
    for t in gp.sparse_initializer:
        raise UnsupportedOperatorError(f"[onnx] sparse initializer '{t.values.name}' is not supported",
                                       [("sparse_initializer", "", "not supported", [t.values.name])])
    for vi in gp.input:
        if vi.name in init_names:
            continue  # an initializer listed as an input (a default that may be overridden): kept constant
        if input_values and vi.name in input_values:
            shape, dtype = imp.value_type(vi, "input")
            env[vi.name] = _contig(np.asarray(input_values[vi.name], dtype=_dtypes.to_numpy_dtype(dtype)))
            continue
        shape, dtype = imp.value_type(vi, "input")
        if input_shapes and vi.name in input_shapes:
            want = tuple(None if d is None or d == -1 else int(d) for d in input_shapes[vi.name])
            if len(want) != len(shape) or any(a is not None and b is not None and a != b
                                              for a, b in zip(shape, want)):
                raise OnnxImportError(f"[onnx] input_shapes gives {want} for input '{vi.name}' of shape "
                                      f"{tuple('?' if d is None else d for d in shape)}")
            shape = tuple(b if b is not None else a for a, b in zip(shape, want))
        p = g.placeholder(shape, dtype, name=vi.name)
        inputs[vi.name] = p
        imp.placeholders[vi.name] = p
        env[vi.name] = p
    cx = Context(imp, g, imp.opset)
    imp.run_graph(gp, env, cx)
    outputs = {}
    for vi in gp.output:
        v = env.get(vi.name)
        if v is None:
            raise OnnxImportError(f"[onnx] graph output '{vi.name}' is not produced by any node")
        t = cx.t(v)
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            want = mg_dtype(vi.type.tensor_type.elem_type, f"output '{vi.name}'")
            if t.dtype != want:
                raise OnnxTypeError(f"[onnx] output '{vi.name}' is declared {want.name} but computes {t.dtype.name}")
        outputs[vi.name] = t
    for n in init_names:
        if n not in initializers and isinstance(env.get(n), np.ndarray):
            initializers[n] = env[n]
    return OnnxModel(g, inputs, outputs, initializers, variables, imp.opset, model.producer_name, env)
