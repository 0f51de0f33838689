"""Graph, Tensor, Operation, Executable: the Python face of the C++ IR."""
import numbers
import os
import threading
import weakref
from collections import namedtuple
from collections.abc import Mapping

import numpy as np

from . import _core, _viz
from ._control_flow import ControlFlowMixin
from ._devices import resolve
from ._dtypes import as_dtype, to_numpy_dtype, float32, bool_, is_bfloat16_numpy

GraphError = _core.GraphError
GraphValueError = _core.GraphValueError
GraphTypeError = _core.GraphTypeError
GraphIndexError = _core.GraphIndexError
TensorData = _core.TensorData

ShapedType = namedtuple("ShapedType", ["shape", "dtype"])
ShapedType.__doc__ = "A feed's type for compile(): shape (None for a dim known only at run time) and dtype."
CacheInfo = namedtuple("CacheInfo", ["hits", "misses", "size", "capacity"])


def as_int(value, op, what):
    """An integer argument: ints and numpy integers only (2.5 must not quietly become 2)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise GraphTypeError(f"[{op}] {what} must be an integer, got {value!r}")
    return int(value)


def host_array(value, dtype, op):
    """numpy array for a constant, variable or list feed; errors name the op and the value.
    A non-integral float for an integer or bool dtype is an error (the operand rule), never
    truncated."""
    nd = to_numpy_dtype(dtype) if dtype is not None else None
    if nd is not None and nd.kind in "biu" and not isinstance(value, np.ndarray):
        probe = np.asarray(value) if isinstance(value, (list, tuple, numbers.Number, np.generic)) else None
        if probe is not None and probe.dtype.kind in "fc":
            if probe.dtype.kind == "c" or not np.all(np.isfinite(probe)) or not np.all(probe == np.round(probe)):
                raise GraphTypeError(f"[{op}] float value {value!r} cannot take the integer dtype {nd.name}; "
                                     f"use integral values or a float tensor and cast")
            if nd.kind in "iu" and probe.size:
                info = np.iinfo(nd)
                if probe.min() < info.min or probe.max() > info.max:
                    raise GraphValueError(f"[{op}] value {value!r} is out of range for {nd.name}")
    try:
        arr = np.array(value, dtype=nd, copy=True)
    except OverflowError:
        raise GraphValueError(f"[{op}] value {value!r} is out of range for {as_dtype(dtype).name}") from None
    except (TypeError, ValueError) as e:
        what = as_dtype(dtype).name if dtype is not None else "any dtype"
        raise GraphTypeError(f"[{op}] cannot make a tensor of {what} from {value!r}: {e}") from None
    if arr.dtype == object and _has_big_int(value):
        raise GraphValueError(f"[{op}] integer value {value!r} is out of range for int64 and uint64")
    as_dtype(arr.dtype, op)  # unsupported dtypes (strings, complex, objects) raise naming the op
    return arr


def _has_big_int(value):
    if isinstance(value, (list, tuple)):
        return any(_has_big_int(v) for v in value)
    return isinstance(value, int) and not isinstance(value, bool)


def python_default_dtype(arr, value, op):
    """Python floats become float32, complex numbers complex64 and ints int32 (MPSGraph's defaults); an int that
    int32 cannot hold is refused rather than wrapped."""
    if isinstance(value, (np.ndarray, np.generic)):
        return arr
    if arr.dtype == np.float64:
        return arr.astype(np.float32)
    if arr.dtype == np.complex128:
        return arr.astype(np.complex64)
    if arr.dtype in (np.int64, np.uint64):
        if arr.size and (arr.min() < -2**31 or arr.max() > 2**31 - 1):
            raise GraphValueError(f"[{op}] Python int {value!r} is out of range for int32 (the default for "
                                  f"Python ints); pass dtype=mg.int64")
        return arr.astype(np.int32)
    return arr


# ---------------- TensorData helpers (the class lives in C++) ----------------

def _td_numpy(self):
    """A numpy view of the data (no copy); GPU data is copied to the host first."""
    if self.device.startswith("cuda"):  # a host copy; bfloat16's view below would outlive it
        host = self._to_host()
        return _td_numpy(host).copy() if self.dtype == _core.DType.bfloat16 else _td_numpy(host)
    if self.dtype == _core.DType.bfloat16:
        return np.frombuffer(self._raw(), dtype=to_numpy_dtype(self.dtype)).reshape(self.shape)
    return np.asarray(self)


def _td_array(self, dtype=None, copy=None):
    a = _td_numpy(self)
    if dtype is not None:
        a = a.astype(dtype, copy=bool(copy))
    elif copy:
        a = a.copy()
    return a


def _td_repr(self):
    try:
        body = np.array2string(_td_numpy(self), separator=", ")
    except Exception:  # pragma: no cover
        body = "..."
    return f"TensorData({body}, dtype={self.dtype.name}, device={self.device})"


def _td_to(self, device):
    """The data on `device` ("cpu", "cuda:0"): itself when it is there, else a copy."""
    return self._to_device(str(device))


TensorData.numpy = _td_numpy
TensorData.to = _td_to
TensorData.__array__ = _td_array
TensorData.__repr__ = _td_repr
TensorData.__len__ = lambda self: (self.shape[0] if self.shape
                                   else (_ for _ in ()).throw(TypeError("len() of a 0-d TensorData")))


def feed_value(value, dtype=None, op="run"):
    """What the C++ run path takes for a feed: a plain numpy array of a builtin dtype goes
    as it is (C++ wraps it once, without a copy); anything else becomes TensorData here."""
    if type(value) is np.ndarray and value.dtype.isbuiltin == 1:  # not bfloat16 (2: user-defined)
        return value
    return as_tensor_data(value, dtype, op)


def as_tensor_data(value, dtype=None, op="run"):
    """TensorData for a feed: TensorData, numpy/buffer/DLPack objects in place; Python lists
    and scalars through numpy (with the placeholder's dtype when given)."""
    if isinstance(value, TensorData):
        return value
    if hasattr(value, "__dlpack__") or isinstance(value, (np.ndarray, memoryview, bytearray)):
        if isinstance(value, np.ndarray) and is_bfloat16_numpy(value.dtype):
            return TensorData(value.view(np.uint16))._reinterpret(bfloat16_)  # same memory
        return TensorData(value)
    if isinstance(value, (list, tuple, numbers.Number, np.generic)):
        return TensorData(np.asarray(host_array(value, dtype, op), order="C"))
    return TensorData(value)


bfloat16_ = _core.DType.bfloat16


# ---------------- Tensors and operations ----------------

class Operation:
    """A node of the graph, usable in target_operations (e.g. what assign returns)."""

    __slots__ = ("graph", "node")

    def __init__(self, graph, node):
        self.graph = graph
        self.node = node

    @property
    def name(self):
        return self.graph._g.node_name(self.node)

    @property
    def op_type(self):
        return self.graph._g.node_op(self.node)

    @property
    def input_tensors(self):
        return [self.graph._tensor(n, i) for n, i in self.graph._g.node_inputs(self.node)]

    @property
    def output_tensors(self):
        return [self.graph._tensor(self.node, i) for i in range(self.graph._g.num_outputs(self.node))]

    def __repr__(self):
        return f"Operation({self.op_type}, name='{self.name}')"


class Tensor:
    """A symbolic value in a Graph: an output of an op. Build with Graph methods and the
    usual operators; get values with Graph.run or an Executable."""

    __slots__ = ("graph", "node", "index", "_shape", "_dtype", "__weakref__")
    __array_priority__ = 1000  # numpy defers to our reflected operators

    def __init__(self, graph, node, index):
        self.graph = graph
        self.node = node
        self.index = index
        shape, dtype = graph._g.output_type(node, index)
        self._shape = tuple(shape)
        self._dtype = dtype

    @property
    def shape(self):
        """The static shape; None marks a dim known only at run time."""
        return self._shape

    @property
    def dtype(self):
        return self._dtype

    @property
    def ndim(self):
        return len(self._shape)

    @property
    def name(self):
        return self.graph._g.node_name(self.node)

    @property
    def operation(self):
        return Operation(self.graph, self.node)

    def __repr__(self):
        shape = ("(" + ", ".join("None" if d is None else str(d) for d in self._shape)
                 + ("," if len(self._shape) == 1 else "") + ")")
        return f"Tensor(name='{self.name}', shape={shape}, dtype={self._dtype.name})"

    def __bool__(self):
        raise TypeError("a symbolic Tensor has no truth value; use Graph.select or logical ops to branch")

    def __len__(self):
        if not self._shape or self._shape[0] is None:
            raise TypeError(f"len() of a tensor of shape {self._shape} is not known statically")
        return self._shape[0]

    def __iter__(self):
        raise TypeError("a symbolic Tensor is not iterable; index it or use split/unstack")

    __hash__ = object.__hash__  # Graph keeps one Tensor object per value, so identity is value identity

    # operators: MPSGraph ops with numpy-style sugar
    def _bin(self, op, other, reverse=False):
        g = self.graph
        a, b = (other, self) if reverse else (self, other)
        return getattr(g, op)(a, b)

    def __add__(self, o): return self._bin("addition", o)
    def __radd__(self, o): return self._bin("addition", o, True)
    def __sub__(self, o): return self._bin("subtraction", o)
    def __rsub__(self, o): return self._bin("subtraction", o, True)
    def __mul__(self, o): return self._bin("multiplication", o)
    def __rmul__(self, o): return self._bin("multiplication", o, True)
    def __truediv__(self, o): return self._bin("division", o)
    def __rtruediv__(self, o): return self._bin("division", o, True)
    def __floordiv__(self, o): return self._bin("floor_division", o)
    def __rfloordiv__(self, o): return self._bin("floor_division", o, True)
    def __mod__(self, o): return self._bin("modulo", o)
    def __rmod__(self, o): return self._bin("modulo", o, True)
    def __pow__(self, o): return self._bin("power", o)
    def __rpow__(self, o): return self._bin("power", o, True)
    def __matmul__(self, o): return self._bin("matrix_multiplication", o)
    def __rmatmul__(self, o): return self._bin("matrix_multiplication", o, True)
    def __lt__(self, o): return self._bin("less_than", o)
    def __le__(self, o): return self._bin("less_than_or_equal_to", o)
    def __gt__(self, o): return self._bin("greater_than", o)
    def __ge__(self, o): return self._bin("greater_than_or_equal_to", o)
    def __eq__(self, o): return self._bin("equal", o)
    def __ne__(self, o): return self._bin("not_equal", o)
    def __and__(self, o): return self._bin("logical_and" if self._dtype == bool_ else "bitwise_and", o)
    def __rand__(self, o): return self._bin("logical_and" if self._dtype == bool_ else "bitwise_and", o, True)
    def __or__(self, o): return self._bin("logical_or" if self._dtype == bool_ else "bitwise_or", o)
    def __ror__(self, o): return self._bin("logical_or" if self._dtype == bool_ else "bitwise_or", o, True)
    def __xor__(self, o): return self._bin("logical_xor" if self._dtype == bool_ else "bitwise_xor", o)
    def __rxor__(self, o): return self._bin("logical_xor" if self._dtype == bool_ else "bitwise_xor", o, True)
    def __lshift__(self, o): return self._bin("bitwise_left_shift", o)
    def __rshift__(self, o): return self._bin("bitwise_right_shift", o)
    def __neg__(self): return self.graph.negative(self)
    def __pos__(self): return self
    def __abs__(self): return self.graph.absolute(self)
    def __invert__(self): return self.graph.logical_not(self) if self._dtype == bool_ else self.graph.bitwise_not(self)

    def __getitem__(self, index):
        from ._indexing import getitem
        return getitem(self, index)

    @property
    def T(self):
        return self.graph.transpose(self)

    def astype(self, dtype):
        return self.graph.cast(self, dtype)

    def __getattr__(self, name):
        # t.exponent(), t.reshape((2, 3)), t.sum(axis=0): any op method with t as first input
        if name.startswith("_"):
            raise AttributeError(name)
        from ._ops import OP_METHODS
        if name in OP_METHODS:
            method = getattr(self.graph, name)
            return lambda *args, **kw: method(self, *args, **kw)
        raise AttributeError(f"'Tensor' object has no attribute '{name}'")


class Variable(Tensor):
    """A variable: graph state with an initial value. As a tensor it reads the value from
    before the run; Graph.assign(var, value) sets it when the run completes."""

    __slots__ = ("variable_id",)

    @property
    def value(self):
        """The current value as TensorData (no copy)."""
        return self.graph._g.variable_value(self.variable_id)


# ---------------- Graph ----------------

def _targets_list(targets):
    if targets is None:
        return []
    if isinstance(targets, (Tensor, Operation)):
        return [targets]
    return list(targets)


_async_pool = None
_async_lock = threading.Lock()


def _forget_async_pool():
    # after fork() the child has none of the parent's worker threads: make a new pool there
    global _async_pool, _async_lock
    _async_pool = None
    _async_lock = threading.Lock()
    import sys

    if "mpsgraph._gpu_runs" in sys.modules:
        sys.modules["mpsgraph._gpu_runs"].forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_async_pool)


def _is_array_like(x):
    return isinstance(x, (np.ndarray, TensorData, memoryview, bytes, bytearray)) or hasattr(x, "__dlpack__")


def _out_values(out):
    """out= buffers for the C++ run, which refuses any that would need a copy (non-contiguous,
    misaligned), is read-only, or shares memory with an input, a variable or another out."""
    if out is None:
        return None
    if _is_array_like(out):
        raise GraphTypeError(f"[run] out= must be a list of buffers, one per target, got a {type(out).__name__}; "
                             f"wrap it in a list: out=[buf]")
    r = []
    for o in out:
        if isinstance(o, np.ndarray) and is_bfloat16_numpy(o.dtype):
            if not (o.flags.c_contiguous and o.flags.writeable):
                raise GraphValueError("[run] out= bfloat16 array must be C-contiguous and writeable")
            o = TensorData(o.view(np.uint16))._reinterpret(bfloat16_)  # the same memory
        r.append(o)
    return r


def _check_shape_dtype_order(shape, dtype, op):
    """(dtype, shape) given where (shape, dtype) is expected: say so instead of failing on
    iterating a dtype."""
    def is_dtype(x):
        return isinstance(x, (_core.DType, np.dtype, str)) or (isinstance(x, type) and issubclass(x, np.generic))
    if is_dtype(shape) and isinstance(dtype, (tuple, list)):
        raise GraphTypeError(f"[{op}] expects (shape, dtype) but got ({shape!r}, {dtype!r}): the dtype comes second")
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
        raise GraphTypeError(f"[{op}] shape must be a tuple of ints (None for an unknown dim), got {shape!r}")


def _pool():
    global _async_pool
    with _async_lock:
        if _async_pool is None:
            import concurrent.futures  # here, not at import: it loads logging (~10 ms)

            _async_pool = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="mpsgraph")
        return _async_pool


class Graph(ControlFlowMixin):
    """A computational graph, as MPSGraph: placeholders, constants, variables and ops.

    Op methods (addition, matrix_multiplication, reduction_sum, ...) are generated from the
    op registry; see mpsgraph.op_names()."""

    def __init__(self):
        self._g = _core.Graph()
        # Tensors refer to their graph; the graph refers to them only weakly, so a dropped
        # graph (its constants, variables and compiled executables) is freed as soon as its
        # last Tensor, Operation or Executable goes, without waiting for the cyclic collector.
        # One Tensor object per value while any is alive (identity is value identity).
        self._tensors = weakref.WeakValueDictionary()
        self._control_deps = {}  # control_dependency: result node -> operations it runs (node ids)

    # -- tensor bookkeeping --
    def _tensor(self, node, index=0):
        key = (node, index)
        t = self._tensors.get(key)
        if t is None:
            if self._g.node_op(node) == "read_variable":
                t = Variable.__new__(Variable)
                Tensor.__init__(t, self, node, index)
                t.variable_id = self._g.node_attrs(node)["variable"]
            else:
                t = Tensor(self, node, index)
            self._tensors[key] = t
        return t

    def _add(self, op, inputs, attrs, name=None):
        refs = [(-1, 0) if t is None else (t.node, t.index) for t in inputs]
        outs = self._g.add_op(op, refs, attrs, name or "")
        return [self._tensor(n, i) for n, i in outs]

    def _check_tensor(self, t, op, what="input"):
        if not isinstance(t, Tensor):
            raise GraphTypeError(f"[{op}] {what} must be a Tensor, got {type(t).__name__}")
        if t.graph is not self:
            raise GraphValueError(f"[{op}] {what} '{t.name}' belongs to another graph")
        return t

    # -- sources --
    def placeholder(self, shape, dtype=float32, name=None):
        """A tensor fed at run time; None in shape marks a dim known only then."""
        if shape is None:
            raise GraphValueError("[placeholder] unranked placeholders are not supported; "
                                  "give a shape (None for unknown dims)")
        _check_shape_dtype_order(shape, dtype, "placeholder")
        shape = tuple(None if d is None or d == -1 else as_int(d, "placeholder", "a dim") for d in shape)
        return self._add("placeholder", [], {"shape": shape, "dtype": as_dtype(dtype, "placeholder")}, name)[0]

    def constant(self, value, dtype=None, name=None):
        """A constant. Python floats become float32, ints int32 and bools bool unless dtype
        is given; numpy arrays keep their dtype."""
        if isinstance(value, Tensor):
            raise GraphTypeError("[constant] value is already a Tensor")
        if isinstance(value, TensorData):
            value = value.numpy()
        arr = host_array(value, dtype, "constant")
        if dtype is None:  # Python floats and ints: MPSGraph's 32-bit defaults
            arr = python_default_dtype(arr, value, "constant")
        data = as_tensor_data(np.asarray(arr, order="C"))
        return self._add("constant", [], {"value": data}, name)[0]

    def variable(self, initial_value, dtype=None, name=None):
        """A variable holding initial_value (copied). Returns a Tensor that reads it."""
        if isinstance(initial_value, TensorData):
            initial_value = initial_value.numpy()
        arr = host_array(initial_value, dtype, "variable")
        if dtype is None:
            arr = python_default_dtype(arr, initial_value, "variable")
        data = as_tensor_data(np.asarray(arr, order="C"))
        vid = self._g.add_variable(data, name or "")
        dt = data.dtype
        n, i = self._g.add_op("read_variable", [], {"variable": vid, "dtype": dt, "shape": tuple(data.shape)},
                              name or "")[0]
        return self._tensor(n, i)

    def read(self, variable, name=None):
        """The variable's value at the start of the run (MPSGraph's readVariable)."""
        v = self._as_variable(variable, "read_variable")
        return v

    read_variable = read

    def assign(self, variable, value, name=None):
        """Sets variable to value when the run completes; pass the returned Operation in
        target_operations (MPSGraph's assignVariable)."""
        v = self._as_variable(variable, "assign_variable")
        if not isinstance(value, Tensor):
            value = self.constant(value, dtype=v.dtype)
        self._check_tensor(value, "assign_variable", "value")
        self._g.add_op("assign_variable", [(value.node, value.index)],
                       {"variable": v.variable_id, "dtype": v.dtype, "shape": v.shape}, name or "")
        return Operation(self, len(self._g) - 1)

    assign_variable = assign

    def _as_variable(self, v, op):
        if not isinstance(v, Variable):
            raise GraphTypeError(f"[{op}] expects a Variable made by Graph.variable, got {type(v).__name__}")
        if v.graph is not self:
            raise GraphValueError(f"[{op}] variable '{v.name}' belongs to another graph")
        return v

    def variable_data(self, variable):
        """The variable's current value as TensorData (no copy)."""
        return self._g.variable_value(self._as_variable(variable, "variable_data").variable_id)

    def set_variable(self, variable, data):
        """Replaces the variable's value (same shape and dtype)."""
        v = self._as_variable(variable, "set_variable")
        self._g.set_variable(v.variable_id, as_tensor_data(data, v.dtype))

    # -- running --
    def _feeds(self, feeds, op):
        if feeds is not None and not isinstance(feeds, Mapping):
            raise GraphTypeError(f"[{op}] feeds must be a dict {{placeholder: value}}, got {type(feeds).__name__}")
        nodes, datas = [], []
        for t, value in (feeds or {}).items():
            self._check_tensor(t, op, "feed key")
            nodes.append(t.node)
            datas.append(feed_value(value, t.dtype))
        return nodes, datas

    def _targets(self, targets, target_operations, op):
        ts = _targets_list(targets)
        for t in ts:
            self._check_tensor(t, op, "target")
        ops = []
        for o in _targets_list(target_operations):
            if isinstance(o, Tensor):
                o = o.operation
            if not isinstance(o, Operation) or o.graph is not self:
                raise GraphValueError(f"[{op}] target operation {o!r} is not an Operation of this graph")
            ops.append(o.node)
        ops += [o for o in self._dependent_operations(ts) if o not in ops]
        return ts, ops

    def run(self, feeds=None, targets=None, target_operations=None, device=None):
        """Runs the graph: returns {target: TensorData}. Compiled executables are cached per
        (targets, feed shapes and dtypes, device)."""
        nodes, datas = self._feeds(feeds, "run")
        ts, ops = self._targets(targets, target_operations, "run")
        outs = self._g.run(nodes, datas, [(t.node, t.index) for t in ts], ops, resolve(device))
        return dict(zip(ts, outs))

    def compile(self, feeds, targets, target_operations=None, device=None):
        """Compiles for the feeds' types ({placeholder: ShapedType or (shape, dtype)}) and
        returns an Executable. None dims are specialised on each new run-time shape."""
        nodes, types = [], []
        for t, ty in (feeds or {}).items():
            self._check_tensor(t, "compile", "feed key")
            if isinstance(ty, (TensorData, np.ndarray)):
                ty = ShapedType(ty.shape, ty.dtype)
            if not isinstance(ty, (tuple, list)) or len(ty) != 2:
                raise GraphTypeError(f"[compile] the type of feed '{t.name}' must be ShapedType(shape, dtype) or "
                                     f"(shape, dtype), got {ty!r}")
            shape, dtype = ty
            _check_shape_dtype_order(shape, dtype, "compile")
            nodes.append(t.node)
            types.append((tuple(None if d is None or d == -1 else as_int(d, "compile", "a dim") for d in shape),
                          as_dtype(dtype, "compile")))
        ts, ops = self._targets(targets, target_operations, "compile")
        exe = self._g.compile(nodes, types, [(tt.node, tt.index) for tt in ts], ops, resolve(device))
        return Executable(self, exe, [self._tensor(n) for n in nodes], ts)

    def cache_info(self):
        return CacheInfo(**self._g.cache_info())

    def clear_cache(self):
        self._g.clear_cache()

    def set_cache_capacity(self, capacity):
        """Bounds Graph.run's executable cache (least recently used go first); at least 1."""
        capacity = as_int(capacity, "set_cache_capacity", "capacity")
        if capacity < 1:
            raise GraphValueError(f"[set_cache_capacity] capacity must be at least 1, got {capacity}")
        self._g.set_cache_capacity(capacity)

    @property
    def num_nodes(self):
        return len(self._g)

    @property
    def operations(self):
        return [Operation(self, n) for n in range(len(self._g))]

    # -- reading the graph (layout in _viz.py) --
    def format(self, expand_composites=False, max_nodes=None, targets=None):
        """The graph as text, one line per node: name: dtype[shape] = op(inputs, attr=value).

        Nodes come in creation order; None marks a dim known only at run time;
        attributes show where they differ from the defaults; constants and variables show
        their value when tiny. Composites (softmax, gelu, ...) show as one line;
        expand_composites=True lists each one's decomposition indented under it, as
        backends without a native kernel for it run it. max_nodes bounds the listing
        (first and last lines around an ellipsis; repr(g) uses it); targets (tensors or
        operations) keeps only the nodes they need."""
        return _viz.graph_format(self, expand_composites, max_nodes, targets)

    def __str__(self):
        return self.format()

    def __repr__(self):
        return self.format(max_nodes=_viz.REPR_NODES)

    def to_dot(self, expand_composites=False, targets=None):
        """Graphviz DOT source of the graph (composites as clusters with expand_composites=True).

        A node per op (op, name, output types; placeholders, constants and variables
        drawn apart), edges labelled with shapes. With expand_composites=True each
        composite is a cluster holding its decomposition. targets (tensors or
        operations) keeps only the nodes they need, and draws them bold."""
        return _viz.graph_to_dot(self, expand_composites, targets)

    def to_svg(self, expand_composites=False, targets=None):
        """The to_dot() picture as SVG text, drawn by Graphviz (raises naming what to install).

        Uses the `graphviz` Python package when installed, else the `dot` program."""
        return _viz.render_svg(self.to_dot(expand_composites, targets))

    def _repr_svg_(self):
        return _viz.repr_svg(self)


class Executable:
    """A compiled graph for fixed feed types on one device (MPSGraphExecutable)."""

    def __init__(self, graph, exe, feed_tensors, target_tensors):
        self.graph = graph
        self._exe = exe
        self.feed_tensors = feed_tensors
        self.target_tensors = target_tensors

    @property
    def device(self):
        return self._exe.device

    @property
    def num_specializations(self):
        return self._exe.num_specializations

    @property
    def num_compilations(self):
        """Backend compilations so far: one per specialisation, or one per stage of a graph
        with data-dependent ops (a run whose sizes were seen before compiles nothing)."""
        return self._exe.num_compilations

    def memory_plan(self):
        """Where each value of the most recent specialisation lives, one dict per value:
        node, op, storage ('feed', 'constant', 'variable', 'arena', 'output', 'scratch',
        'view': the same bytes as node `alias_of`, no copy, or 'data_dependent': allocated by
        a data-dependent op as it runs), buffer index, nbytes and stage (a graph with
        data-dependent ops runs in stages: the entries of the most recent run's stages, in
        order; buffer indices are per stage). On the CPU the front of a batched network may
        run one image at a time: its entries come first, their storage prefixed 'image ' (one
        image's bytes; each thread that runs images has its own arena)."""
        return self._exe.memory_plan()

    def _inputs(self, inputs):
        if _is_array_like(inputs):
            raise GraphTypeError(f"[run] inputs must be a list in feed_tensors order (or a dict), got a "
                                 f"{type(inputs).__name__}; wrap a single input in a list: run([x])")
        if isinstance(inputs, dict):
            missing = [t.name for t in self.feed_tensors if t not in inputs]
            if missing:
                raise GraphValueError(f"[run] no input for placeholder(s) {missing}")
            inputs = [inputs[t] for t in self.feed_tensors]
        inputs = list(inputs)
        if len(inputs) != len(self.feed_tensors):
            raise GraphValueError(f"[run] expected {len(self.feed_tensors)} inputs in the order of feed_tensors, "
                                  f"got {len(inputs)}")
        return [feed_value(v, t.dtype) for v, t in zip(inputs, self.feed_tensors)]

    def run(self, inputs=(), out=None):
        """Runs with inputs (a list in feed_tensors order, or a dict); returns a list of
        TensorData in target order. out= gives buffers to write the results into."""
        ins = self._inputs(inputs)
        return self._exe.run(ins, _out_values(out))

    def run_async(self, inputs=(), out=None):
        """Starts a run and returns a concurrent.futures.Future of its result list.

        On cuda:0 the run is queued before this returns (input copies, the CUDA graph,
        result copies) and the future completes when the GPU has finished it, so host work
        and the next run's copies overlap this run's compute."""
        ins = self._inputs(inputs)
        if self._exe.device.startswith("cuda"):
            from . import _gpu_runs  # here, not at import: concurrent.futures loads logging

            try:
                queued = self._exe._start(ins, _out_values(out))
            except Exception as e:  # raised through the future, as on the other devices
                import concurrent.futures

                f = concurrent.futures.Future()
                f.set_exception(e)
                return f
            return _gpu_runs.completions().submit(queued)
        return _pool().submit(self._exe.run, ins, _out_values(out))

    __call__ = run


def _gradients(self, y, xs, dy=None):
    """Appends the gradient graph: returns {x: d(y)/d(x)} for each x in xs (placeholders,
    variables or intermediate tensors). dy seeds the backward pass (ones when None, so a
    non-scalar y is differentiated as its sum). The gradients are ordinary tensors of this
    graph: run, compile or differentiate them again."""
    single = isinstance(xs, Tensor)
    xs = [xs] if single else list(xs)
    self._check_tensor(y, "gradients", "y")
    for x in xs:
        self._check_tensor(x, "gradients", "x")
    d = None
    if dy is not None:
        if not isinstance(dy, Tensor):
            dy = self.constant(dy, dtype=y.dtype)
        self._check_tensor(dy, "gradients", "dy")
        d = (dy.node, dy.index)
    refs = self._g.gradients((y.node, y.index), [(x.node, x.index) for x in xs], d)
    return {x: self._tensor(n, i) for x, (n, i) in zip(xs, refs)}


Graph.gradients = _gradients
Graph.gradient_for_primary_tensor = _gradients
