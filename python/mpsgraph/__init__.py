"""mpsgraph: Apple's MPSGraph programming model for Python, on Metal, CPU and CUDA.

    import mpsgraph as mg
    g = mg.Graph()
    x = g.placeholder((None, 3), mg.float32, name="x")
    y = g.reduction_sum(g.relu(x) * 2.0, axes=1)
    print(g.run({x: np.ones((2, 3), np.float32)}, [y])[y])
"""
import sys as _sys

if _sys.platform.startswith("linux"):
    # _core needs libscipy_openblas; load it from the installed scipy_openblas32 package so
    # the extension finds it wherever pip put that package (not only beside this one). The
    # package is found, not imported: its import reads its version with importlib.metadata,
    # which cost a third of `import mpsgraph`. Its lib/ holds one libscipy_openblas*.so, the
    # file scipy_openblas32.get_library() names.
    import ctypes as _ctypes
    import importlib.util as _importlib_util
    import os as _os

    _spec = _importlib_util.find_spec("scipy_openblas32")
    if _spec is None or not _spec.submodule_search_locations:
        raise ImportError("mpsgraph needs the scipy-openblas32 package on Linux: pip install scipy-openblas32")
    _libdir = _os.path.join(_spec.submodule_search_locations[0], "lib")
    _ctypes.CDLL(_os.path.join(_libdir, next(f for f in sorted(_os.listdir(_libdir))
                                             if f.startswith("libscipy_openblas") and ".so" in f)),
                 mode=_ctypes.RTLD_GLOBAL)
    del _spec, _libdir
from . import _core
from ._dtypes import (DType, as_dtype, bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16,
                      bfloat16, float32, float64, complex64, complex128)
from ._devices import Device, cpu, metal, cuda, devices, default_device
from ._graph import (Graph, Tensor, Variable, Operation, Executable, ShapedType, TensorData, CacheInfo, GraphError,
                     GraphValueError, GraphTypeError, GraphIndexError)
from ._sparse import SparseTensor  # before _ops: Graph.sparse_tensor is hand-written
from . import _ops
from ._ops import op_names
from . import _sugar  # noqa: F401  numpy-style aliases with numpy defaults

GraphRuntimeError = _core.GraphRuntimeError
GraphNotImplementedError = _core.GraphNotImplementedError
set_num_threads = _core.set_num_threads  # the CPU backend's threads (kernels and BLAS together)
get_num_threads = _core.get_num_threads

__version__ = "0.1.0"
bool = bool_  # mg.bool as in MLX/JAX naming


def op_schemas():
    """The registry: one dict per op (inputs, attributes, docs, differentiability)."""
    return list(_ops.SCHEMAS.values())
from . import optimizers  # noqa: E402
from . import profiler  # noqa: E402
from . import onnx  # noqa: E402  the ONNX importer (the onnx package is imported only by load())
