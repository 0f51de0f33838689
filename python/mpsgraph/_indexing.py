"""Tensor.__getitem__: numpy basic indexing lowered to one strided_slice (plus expand_dims
for None). Ints (negative count from the end), slices with any step (None parts allowed),
None (new axis), Ellipsis, and tuples of those. Dims known only at run time are resolved
by the op when the graph is specialised."""
import numbers

import numpy as np

from . import _core
from ._graph import GraphIndexError, GraphTypeError, Tensor

GraphNotImplementedError = _core.GraphNotImplementedError

_ADVANCED = "[getitem] advanced (array) indexing is not supported; use gather"


def _as_int(v, what):
    """An index or slice bound as a Python int (anything with __index__, not bool)."""
    if isinstance(v, (bool, np.bool_)):
        raise GraphNotImplementedError(_ADVANCED)
    if isinstance(v, Tensor):
        raise GraphNotImplementedError(f"[getitem] a Tensor as {what} (dynamic indexing) is not supported; "
                                       f"use gather or slice ops")
    if hasattr(v, "__index__"):
        try:
            return int(v.__index__())
        except TypeError:
            pass
    raise GraphTypeError(f"[getitem] {what} must be an int, None or a slice, got {type(v).__name__}")


def _items(index):
    if isinstance(index, tuple):
        return list(index)
    if isinstance(index, list):  # numpy treats a list as an array index
        raise GraphNotImplementedError(_ADVANCED)
    return [index]


def getitem(tensor, index):
    """tensor[index] with numpy's basic indexing rules."""
    items = _items(index)
    for it in items:
        if it is None or it is Ellipsis or isinstance(it, slice):
            continue
        if isinstance(it, (bool, np.bool_, np.ndarray, list, tuple, Tensor)):
            raise GraphNotImplementedError(_ADVANCED)
        if not isinstance(it, numbers.Integral) and not hasattr(it, "__index__"):
            raise GraphTypeError(f"[getitem] indices must be ints, slices, None or Ellipsis, got {type(it).__name__}")

    rank = tensor.ndim
    n_ellipsis = sum(1 for it in items if it is Ellipsis)
    if n_ellipsis > 1:
        raise GraphIndexError("[getitem] an index can only have a single ellipsis ('...')")
    consumed = sum(1 for it in items if it is not None and it is not Ellipsis)
    if consumed > rank:
        raise GraphIndexError(f"[getitem] too many indices for a tensor of rank {rank}: {consumed} were given")
    if n_ellipsis:
        k = items.index(Ellipsis)
        items = items[:k] + [slice(None)] * (rank - consumed) + items[k + 1:]
    else:
        items = items + [slice(None)] * (rank - consumed)

    starts, ends, strides = [], [], []
    start_mask = end_mask = squeeze_mask = 0
    new_axes = []  # positions of None in the result
    out_pos = 0
    trivial = True
    for it in items:
        if it is None:
            new_axes.append(out_pos)
            out_pos += 1
            continue
        dim = len(starts)
        bit = 1 << dim
        if isinstance(it, slice):
            step = 1 if it.step is None else _as_int(it.step, "a slice step")
            if step == 0:
                raise _core.GraphValueError("[getitem] slice step cannot be zero")
            if it.start is None:
                start_mask |= bit
                starts.append(0)
            else:
                starts.append(_as_int(it.start, "a slice start"))
            if it.stop is None:
                end_mask |= bit
                ends.append(0)
            else:
                ends.append(_as_int(it.stop, "a slice stop"))
            strides.append(step)
            if not (it.start is None and it.stop is None and step == 1):
                trivial = False
            out_pos += 1
        else:
            i = _as_int(it, "an index")
            starts.append(i)
            ends.append(i + 1 if i != -1 else 0)
            strides.append(1)
            squeeze_mask |= bit
            trivial = False

    g = tensor.graph
    out = tensor
    if not trivial:
        big = (1 << 63) - 1
        clamp = lambda v: max(-big - 1, min(big, v))  # noqa: E731  Python ints may exceed int64
        out = g.strided_slice(out, [clamp(v) for v in starts], [clamp(v) for v in ends],
                              [clamp(v) for v in strides], start_mask=start_mask, end_mask=end_mask,
                              squeeze_mask=squeeze_mask)
    if new_axes:
        out = g.expand_dims(out, new_axes)
    return out
