"""onnx.backend.base.Backend for mpsgraph: runs ONNX models (and single nodes) through the importer.

    from mpsgraph.onnx.backend import MpsgraphBackend
    rep = MpsgraphBackend.prepare(model)        # imports once
    outputs = rep.run([x])                       # inputs in the graph's input order

Importing this module imports onnx."""
import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep, namedtupledict

from .. import _devices
from ._errors import UnsupportedOperatorError
from ._model import load, MIN_OPSET, NEEDS_VALUE as _NEEDS_VALUE

_DEVICES = {"CPU": "cpu", "METAL": "metal", "MPS": "metal", "CUDA": "cuda"}


def _device(device):
    kind, _, idx = str(device).upper().partition(":")
    return _devices.Device(_DEVICES.get(kind, kind.lower()), int(idx) if idx else None)


def _convert_old(model):
    """Models of opsets before 13 (which load() refuses) converted with onnx.version_converter, as
    load()'s error message suggests; left as they are when the converter cannot."""
    ver = next((int(i.version) for i in model.opset_import if i.domain in ("", "ai.onnx")), None)
    if ver is None or ver >= MIN_OPSET:
        return model
    try:
        from onnx import version_converter
        return version_converter.convert_version(model, MIN_OPSET)
    except Exception:
        return model


class MpsgraphBackendRep(BackendRep):
    """A prepared model: runs it with a list of inputs (graph input order) or a dict.

    A model that needs some of its inputs' values when it is imported (a Reshape's shape, TopK's
    K, Slice's starts fed as graph inputs) is imported again for each new set of values of its
    small integer inputs, which then become constants (the compiled graphs are cached)."""

    _MAX_CACHED = 16

    def __init__(self, model_proto, device="CPU"):
        model_proto = _convert_old(model_proto)
        self.proto = model_proto
        self.device = _device(device)
        self.names = [vi.name for vi in model_proto.graph.input
                      if vi.name not in {t.name for t in model_proto.graph.initializer}]
        self.model = None
        self.by_values = {}
        try:
            self.model = load(model_proto, check=False)
        except UnsupportedOperatorError as e:
            if _NEEDS_VALUE not in str(e):
                raise
            self.model = None

    def _model_for(self, feeds):
        if self.model is not None:
            return self.model, feeds
        # small integer tensors and short vectors (scales, pads, K, axes); a constant gives the same
        # results as a fed value, so this only costs an import per new set of values
        vals = {n: np.asarray(v) for n, v in feeds.items()
                if np.asarray(v).dtype.kind in "iub" and np.asarray(v).size <= 64 or np.asarray(v).size <= 8}
        key = tuple((n, v.dtype.str, v.shape, v.tobytes()) for n, v in sorted(vals.items()))
        m = self.by_values.get(key)
        if m is None:
            m = load(self.proto, check=False, input_values=vals)
            if len(self.by_values) >= self._MAX_CACHED:
                self.by_values.pop(next(iter(self.by_values)))
            self.by_values[key] = m
        return m, {n: v for n, v in feeds.items() if n in m.inputs}

    def run(self, inputs, **kwargs):
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            if not isinstance(inputs, (list, tuple)):
                inputs = [inputs]
            feeds = dict(zip(self.names, inputs))
        model, feeds = self._model_for(feeds)
        res = model.run(feeds, device=self.device)
        return namedtupledict("Outputs", list(res))(*[np.asarray(v) for v in res.values()])


class MpsgraphBackend(Backend):
    @classmethod
    def is_compatible(cls, model, device="CPU", **kwargs):
        return cls.supports_device(device)

    @classmethod
    def prepare(cls, model, device="CPU", **kwargs):
        super().prepare(model, device, **kwargs)
        return MpsgraphBackendRep(model, device)

    @classmethod
    def run_model(cls, model, inputs, device="CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node, inputs, device="CPU", outputs_info=None, **kwargs):
        """Runs one NodeProto on inputs (numpy arrays, in the node's input order)."""
        super().run_node(node, inputs, device=device, outputs_info=outputs_info)
        names = [n for n in node.input if n]
        vis = [onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(np.asarray(x).dtype),
                                                  np.asarray(x).shape) for n, x in zip(names, inputs)]
        outs = [onnx.helper.make_empty_tensor_value_info(o) for o in node.output if o]
        opset = kwargs.get("opset_version", onnx.defs.onnx_opset_version())
        model = onnx.helper.make_model(onnx.helper.make_graph([node], "node", vis, outs),
                                       opset_imports=[onnx.helper.make_opsetid("", opset)])
        return MpsgraphBackendRep(model, device).run(list(inputs))

    @classmethod
    def supports_device(cls, device):
        try:
            return _device(device).available
        except Exception:
            return False


prepare = MpsgraphBackend.prepare
run_model = MpsgraphBackend.run_model
run_node = MpsgraphBackend.run_node
supports_device = MpsgraphBackend.supports_device
