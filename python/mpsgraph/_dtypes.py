"""dtypes: mg.float32 & co., and conversions from numpy dtypes and strings."""
import sys

import numpy as np

from . import _core

DType = _core.DType
bool_ = _core.DType.bool
int8, int16, int32, int64 = DType.int8, DType.int16, DType.int32, DType.int64
uint8, uint16, uint32, uint64 = DType.uint8, DType.uint16, DType.uint32, DType.uint64
float16, bfloat16, float32, float64 = DType.float16, DType.bfloat16, DType.float32, DType.float64
complex64, complex128 = DType.complex64, DType.complex128

_BF16_NP = None  # numpy's bfloat16 (ml_dtypes), loaded by bfloat16_numpy() on first use


def bfloat16_numpy():
    """numpy's bfloat16 dtype. ml_dtypes is imported here, the first time a bfloat16 value
    crosses to numpy, not with mpsgraph: loading its extension costs more than the rest of
    `import mpsgraph` together."""
    global _BF16_NP
    if _BF16_NP is None:
        try:
            import ml_dtypes
        except ImportError:  # pragma: no cover - ml_dtypes is a dependency
            raise TypeError("bfloat16 needs the ml_dtypes package to be viewed from numpy") from None
        _BF16_NP = np.dtype(ml_dtypes.bfloat16)
    return _BF16_NP


def is_bfloat16_numpy(nd):
    """Whether numpy dtype nd is bfloat16, without importing ml_dtypes for other dtypes (who
    holds a bfloat16 numpy dtype has imported ml_dtypes already)."""
    return nd.name == "bfloat16" and "ml_dtypes" in sys.modules and nd == bfloat16_numpy()

_NAMES = {d.name: d for d in DType.__members__.values()}


def as_dtype(x, op="dtype"):
    """mg.DType from an mg.DType, a numpy dtype/type or a name ('float32', 'bool')."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str) and x in _NAMES:
        return _NAMES[x]
    if isinstance(x, str) and x == "complex32":  # numpy has no complex32 to exchange data with
        raise _core.GraphTypeError(f"[{op}] complex32 is not supported; use complex64")
    if isinstance(x, str) and x in ("half", "float", "double"):
        return {"half": float16, "float": float32, "double": float64}[x]
    try:
        nd = np.dtype(x)
    except TypeError:
        raise _core.GraphTypeError(f"[{op}] not a dtype: {x!r}") from None
    if is_bfloat16_numpy(nd):
        return bfloat16
    name = "bool" if nd == np.bool_ else nd.name
    if name not in _NAMES:
        raise _core.GraphTypeError(f"[{op}] dtype {nd} is not supported by mpsgraph")
    return _NAMES[name]


def to_numpy_dtype(d):
    d = as_dtype(d)
    if d == bfloat16:
        return bfloat16_numpy()
    return np.dtype("bool" if d == bool_ else d.name)


def is_floating(d):
    return as_dtype(d) in (float16, bfloat16, float32, float64)


def is_complex(d):
    return as_dtype(d) in (complex64, complex128)


def is_integer(d):
    return as_dtype(d) in (int8, int16, int32, int64, uint8, uint16, uint32, uint64)
