"""Conformance rows of the quantization family (quantize, dequantize, fake_quantize, dequantize_lut),
imported by conformance.py (the rows join conformance.ROWS: every device, static and None dims,
gradient checks).

References are numpy in float64: q = clip(rint(x / scale + zero_point)) (rint rounds halves to even),
NaN -> 0; (q - zero_point) * scale; lut[..., q] by take_along_axis. Per-axis parameters are reshaped
along the axis by hand. fake_quantize's straight-through gradient is not a derivative of its values,
so tests/test_quantization_image.py checks it against the mask instead of finite differences.
"""
import numpy as np

from conformance import FLOATS, Case, Grad, TorchRef, _CallDom, _INF, _NAN, dom, np_dtype, row, torch_module

_QRANGE = {"int8": (-128, 127), "uint8": (0, 255)}


def _param(p, x, axis):
    p = np.asarray(p, np.float64)
    if axis is None:
        return p.reshape(())
    shape = [1] * x.ndim
    shape[axis] = -1
    return p.reshape(shape)


def _quantize_ref(x, scale, zero_point, dtype="int8", axis=None):
    x = np.asarray(x, np.float64)
    lo, hi = _QRANGE[dtype]
    v = np.rint(x / _param(scale, x, axis) + _param(zero_point, x, axis))
    v = np.where(np.isnan(v), 0, np.clip(v, lo, hi))
    return v.astype(dtype)


def _dequantize_ref(x, scale, zero_point, dtype="float32", axis=None):
    x = np.asarray(x, np.float64)
    return (x - _param(zero_point, x, axis)) * _param(scale, x, axis)


def _fake_quantize_ref(x, scale, zero_point, dtype="int8", axis=None):
    q = _quantize_ref(x, scale, zero_point, dtype, axis)
    return _dequantize_ref(q, scale, zero_point, axis=axis)


def _lut_ref(x, lut):
    x, lut = np.asarray(x), np.asarray(lut, np.float64)
    batch = np.broadcast_shapes(x.shape, lut.shape[:-1])
    lut = np.broadcast_to(lut, batch + (256,))
    idx = np.broadcast_to(x.astype(np.int64), batch)[..., None]
    return np.take_along_axis(lut, idx, axis=-1)[..., 0]


X = dom(lo=-4, hi=4)
SCALE = dom(lo=0.02, hi=0.1)
ZP8 = dom(lo=-6, hi=6, integral=True, ilo=-6, ihi=6)
ZPU8 = dom(lo=100, hi=140, integral=True, ilo=100, ihi=140)
Q8 = dom(ilo=-128, ihi=255, lo=-128, hi=127, integral=True)  # integers clipped to the dtype; integral floats
U8 = dom(ilo=0, ihi=255, lo=0, hi=255, integral=True)


def _q_cases(zp):
    return [
        Case(((2, 3, 4), (), ()), doms=(X, SCALE, zp)),
        Case(((7,), (1,), (1,)), doms=(X, SCALE, zp), label="one-element parameters"),
        Case(((2, 3, 4), (3,), (3,)), {"axis": 1}, doms=(X, SCALE, zp), label="per axis"),
        Case(((2, 3, 4), (4,), (4,)), {"axis": -1}, doms=(X, SCALE, zp), label="per last axis"),
        Case(((2, 3, 4), (1,), (3,)), {"axis": 1}, doms=(X, SCALE, zp), label="broadcast scale"),
        Case(((0, 3), (3,), (3,)), {"axis": 1}, doms=(X, SCALE, zp), label="zero-size"),
        Case(((300, 100), (), ()), doms=(X, SCALE, zp), label="large"),
        Case(values=([_NAN, _INF, -_INF, 0.25, 0.75, -0.25, 1e30, -0.0], [0.5], [0.0]), label="specials and ties"),
    ]


for _qd, _zp in (("int8", ZP8), ("uint8", ZPU8)):
    row(f"quantize_{_qd}", "quantize", lambda x, s, z, dtype, axis=None: _quantize_ref(x, s, z, dtype, axis), FLOATS,
        [Case(c.shapes, {**c.attrs, "dtype": _qd}, c.values, c.dtypes, c.label, c.doms) for c in _q_cases(_zp)],
        out_dtype=_qd, exact=True)
row("quantize_int_zero_point", "quantize", _quantize_ref, ("float32", "float64"),
    [Case(((4, 5), (), ()), doms=(X, SCALE, ZP8)), Case(((4, 5), (5,), (5,)), {"axis": 1}, doms=(X, SCALE, ZP8))],
    input_dtypes=lambda d: (d, d, "int32"), out_dtype="int8", exact=True)

_DQ_CASES = [
    Case(((2, 3, 4), (), ()), doms=(Q8, SCALE, ZP8)),
    Case(((2, 3, 4), (3,), (3,)), {"axis": 1}, doms=(Q8, SCALE, ZP8), label="per axis"),
    Case(((2, 3, 4), (4,), (1,)), {"axis": 2}, doms=(Q8, SCALE, ZP8), label="per axis, one zero point"),
    Case(((0, 4), (), ()), doms=(Q8, SCALE, ZP8), label="zero-size"),
    Case(((200, 150), (150,), (150,)), {"axis": 1}, doms=(Q8, SCALE, ZP8), label="large"),
]
row("dequantize", "dequantize", _dequantize_ref, ("int8", "uint8", "int32"), _DQ_CASES,
    input_dtypes=lambda d: (d if d in ("int8", "uint8", "int32") else "int8", "float32", "float32"),
    out_dtype="float32")
# the finite differences feed every input as float64: the builders cast the integer input back


def _dequantize_int8(g, x, s, z, **kw):
    return g.dequantize(g.cast(x, "int8") if x.dtype.name == "float64" else x, s, z, **kw)


def _lut_uint8(g, x, lut):
    return g.dequantize_lut(g.cast(x, "uint8") if x.dtype.name == "float64" else x, lut)


row("dequantize_out_dtype", _dequantize_int8, _dequantize_ref, FLOATS, _DQ_CASES, covers=("dequantize",),
    input_dtypes=lambda d: ("float64" if d == "float64" else "int8", d, d), dtype_attr="dtype",
    grad=Grad(wrt=(1, 2), cases=(0, 1, 2), second_order=(1,), unknown_dims=(1,)))

row("fake_quantize", "fake_quantize", _fake_quantize_ref, FLOATS,
    [Case(c.shapes, {**c.attrs, "dtype": "int8"}, c.values, c.dtypes, c.label, c.doms) for c in _q_cases(ZP8)] +
    [Case(((3, 4), (), ()), {"dtype": "uint8"}, doms=(X, SCALE, ZPU8), label="uint8")])


_LUT = _CallDom(lambda rng, shape, dtype: rng.uniform(-2, 2, size=shape).astype(np_dtype(dtype)))
row("dequantize_lut", _lut_uint8, _lut_ref, FLOATS, [
    Case(((3, 5), (256,))), Case(((2, 3, 4), (3, 1, 256)), label="per-row tables"),
    Case(((4,), (2, 1, 256)), label="tables broadcast the result"), Case(((0, 3), (256,)), label="zero-size"),
    Case(((100, 200), (100, 1, 256)), label="large")],
    doms=(U8, _LUT), input_dtypes=lambda d: ("float64" if d == "float64" else "uint8", d), exact=True,
    covers=("dequantize_lut",),
    grad=Grad(wrt=(1,), cases=(0, 1), second_order=(1,), unknown_dims=(1,)))


# the straight-through gradient against PyTorch's (autograd of fake_quantize_per_tensor_affine /
# per_channel_affine): dy inside the range, 0 where x clamps
def _t_fake_quantize(x, s, z, dtype="int8", axis=None):
    torch = torch_module()
    lo, hi = _QRANGE[dtype]
    if axis is None:
        return torch.fake_quantize_per_tensor_affine(x, float(s.reshape(-1)[0]), int(z.reshape(-1)[0]), lo, hi)
    return torch.fake_quantize_per_channel_affine(x, s.float(), z.int(), axis, lo, hi)


row("fake_quantize_vs_torch", "fake_quantize", TorchRef(_t_fake_quantize), ("float32", "float64"),
    [Case(((4, 6), (), ()), {"dtype": "int8"}, doms=(X, SCALE, ZP8)),
     Case(((4, 6), (), ()), {"dtype": "uint8"}, doms=(X, SCALE, ZPU8)),
     Case(((2, 3, 4), (3,), (3,)), {"dtype": "int8", "axis": 1}, doms=(X, SCALE, ZP8), label="per axis")],
    tol={"float32": (1e-6, 1e-6), "float64": (1e-6, 1e-6)},  # torch keeps the scale in float32
    grad=Grad(wrt=(0,), cases=()))
