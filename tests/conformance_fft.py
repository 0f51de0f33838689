"""Conformance rows of complex numbers and the FFT family (fast_fourier_transform,
real_to_hermitean_fft, hermitean_to_real_fft), imported by conformance.py (the rows join
conformance.ROWS: every device, static and None dims, gradient checks).

The table's inputs are real, so each row builds its complex tensors with `complex(re, im)` and
returns real and imaginary parts (real_part / imaginary_part): the values compare with numpy
on complex128, and the finite differences (float64 on the CPU) run on the parts, which checks
the gradients' convention (dL/dx + i dL/dy for z = x + iy, as PyTorch) too. float32 rows
compute in complex64.

References are numpy.fft, with MPSGraph's conventions spelled out (tests/fft_reference.py): the
sign of the exponent is '+' when inverse, and the scaling is 1, 1/N or 1/sqrt(N) (N the product of
the real signal's lengths) whatever the sign; the halved axis of the real transforms is the highest
of `axes`.
"""
import numpy as np

from conformance import Case, Grad, dom, row
from fft_reference import fft_ref as _fft_ref, irfft_ref as _irfft_ref, rfft_ref as _rfft_ref

F = ("float32", "float64")
_TOL = {"float32": (2e-4, 2e-4), "float64": (1e-10, 1e-10)}  # sums of up to 1000 terms
_CTOL = {"float32": (1e-5, 1e-5), "float64": (1e-12, 1e-12)}


def _z(re, im):
    return np.asarray(re, np.float64) + 1j * np.asarray(im, np.float64)


def _parts(z):
    return z.real, z.imag


# ----------------------------------------------------------------------------------------
# fast_fourier_transform: complex input from (re, im), and real input


def _fft_op(g, re, im, **a):
    y = g.fast_fourier_transform(g.complex(re, im), **a)
    return g.real_part(y), g.imaginary_part(y)


def _fft_case(shape, label="", **attrs):
    return Case((shape, shape), attrs, label=label)


_FFT_CASES = [
    _fft_case((8,)), _fft_case((7,), label="odd"), _fft_case((1,)),
    _fft_case((3, 5), axes=(1,)), _fft_case((5, 6), axes=(0, 1), inverse=True, scaling_mode="size"),
    _fft_case((2, 3, 5), axes=(0, 2), scaling_mode="unitary"), _fft_case((2, 3, 4), label="all axes"),
    _fft_case((4, 9), axes=(-1,), inverse=True), _fft_case((3, 11, 2), axes=(1,), scaling_mode="size"),
    _fft_case((0, 5), axes=(1,), label="zero-size batch"), _fft_case((13, 17), inverse=True, scaling_mode="unitary"),
    _fft_case((40, 1000), axes=(1,), label="parallel"), _fft_case((1000, 33), axes=(0,), inverse=True),
]
row("fast_fourier_transform", _fft_op, lambda re, im, **a: _parts(_fft_ref(_z(re, im), **a)), F, _FFT_CASES,
    out_dtype=lambda d: (d, d), tol=_TOL, covers=("fast_fourier_transform", "complex", "real_part", "imaginary_part"),
    grad=Grad(cases=(0, 1, 3, 4, 5), second_order=(1,)))


def _fft_real_op(g, x, **a):
    y = g.fast_fourier_transform(x, **a)
    return g.real_part(y), g.imaginary_part(y)


row("fast_fourier_transform_real_input", _fft_real_op, lambda x, **a: _parts(_fft_ref(x.astype(np.complex128), **a)),
    F, [Case(((9,),), {}), Case(((4, 6),), {"axes": (0,), "inverse": True, "scaling_mode": "size"}),
        Case(((3, 2, 5),), {"axes": (1, 2)}), Case(((0, 4),), {"axes": (1,)}, label="zero-size batch")],
    out_dtype=lambda d: (d, d), tol=_TOL, covers=("fast_fourier_transform",), grad=Grad(cases=(0, 1, 2)))


# ----------------------------------------------------------------------------------------
# real_to_hermitean_fft, hermitean_to_real_fft


def _rfft_op(g, x, **a):
    y = g.real_to_hermitean_fft(x, **a)
    return g.real_part(y), g.imaginary_part(y)


_RFFT_CASES = [
    Case(((8,),), {}), Case(((7,),), {}, label="odd"), Case(((1,),), {}), Case(((2,),), {}),
    Case(((3, 10),), {"axes": (1,), "scaling_mode": "size"}), Case(((5, 6),), {"axes": (0, 1), "inverse": True}),
    Case(((4, 5, 3),), {"axes": (0, 1), "scaling_mode": "unitary"}), Case(((6, 4),), {"axes": (0,)}, label="axis 0 halved"),
    Case(((2, 3, 7),), {}, label="all axes"), Case(((0, 6),), {"axes": (1,)}, label="zero-size batch"),
    Case(((64, 999),), {"axes": (-1,)}, label="parallel"),
]
row("real_to_hermitean_fft", _rfft_op, lambda x, **a: _parts(_rfft_ref(x, **a)), F, _RFFT_CASES,
    out_dtype=lambda d: (d, d), tol=_TOL, covers=("real_to_hermitean_fft",),
    grad=Grad(cases=(0, 1, 2, 3, 4, 5, 6, 7), second_order=(1,)))


def _irfft_op(g, re, im, **a):
    return g.hermitean_to_real_fft(g.complex(re, im), **a)


def _half(shape, label="", **attrs):
    return Case((shape, shape), attrs, label=label)


_IRFFT_CASES = [
    _half((5,), inverse=True, scaling_mode="size"), _half((5,), round_to_odd_hermitean=True, label="odd"),
    _half((4,)), _half((1,), round_to_odd_hermitean=True), _half((2,), inverse=True),
    _half((3, 6), axes=(1,), inverse=True, scaling_mode="unitary"),
    _half((4, 3), axes=(0, 1), round_to_odd_hermitean=True, inverse=True, scaling_mode="size"),
    _half((3, 4, 5), axes=(0, 2)), _half((6, 3), axes=(0,), label="axis 0 halved"),
    _half((0, 4), axes=(1,), label="zero-size batch"), _half((50, 700), axes=(1,), inverse=True, label="parallel"),
]
row("hermitean_to_real_fft", _irfft_op, lambda re, im, **a: _irfft_ref(_z(re, im), **a), F, _IRFFT_CASES,
    tol=_TOL, covers=("hermitean_to_real_fft",), grad=Grad(cases=(0, 1, 2, 3, 4, 5, 6, 7), second_order=(0,)))


# ----------------------------------------------------------------------------------------
# complex arithmetic and the complex ops, on (re, im) pairs

_PAIR_SHAPES = [((5,),) * 4, ((2, 3),) * 4, (((3, 1),) * 2 + ((1, 4),) * 2), ((),) * 4, ((0, 3),) * 4,
                ((4, 2),) * 2 + (((2,),) * 2)]
_NZ = dom(nonzero=True)


def _binary(opname, npop, doms=None, **kw):
    def op(g, a, b, c, d):
        z = getattr(g, opname)(g.complex(a, b), g.complex(c, d))
        return g.real_part(z), g.imaginary_part(z)

    row(f"complex_{opname}", op, lambda a, b, c, d: _parts(npop(_z(a, b), _z(c, d))), F,
        [Case(s) for s in _PAIR_SHAPES], doms=doms, out_dtype=lambda d: (d, d), tol=_CTOL, covers=(opname,),
        grad=Grad(cases=(0, 2), second_order=(0,)), **kw)


_binary("addition", np.add)
_binary("subtraction", np.subtract)
_binary("multiplication", np.multiply)
_binary("division", np.divide, doms=(dom(), dom(), _NZ, _NZ))


def _unary(opname, npop, doms=None, real_out=False, **kw):
    def op(g, a, b):
        z = getattr(g, opname)(g.complex(a, b))
        return z if real_out else (g.real_part(z), g.imaginary_part(z))

    row(f"complex_{opname}", op, (lambda a, b: npop(_z(a, b))) if real_out else lambda a, b: _parts(npop(_z(a, b))), F,
        [Case((s, s)) for s in [(5,), (2, 3), (), (0, 4)]], doms=doms, out_dtype=None if real_out else lambda d: (d, d),
        tol=_CTOL, covers=(opname,), grad=Grad(cases=(0, 1), second_order=(0,)), **kw)


_unary("negative", np.negative)
_unary("conjugate", np.conj)
_unary("square", np.square)
_unary("exponent", np.exp, doms=(dom(lo=-2, hi=2), dom()))
_unary("reciprocal", np.reciprocal, doms=(_NZ, _NZ))
_unary("identity", lambda z: z)
_unary("absolute", np.abs, doms=(_NZ, _NZ), real_out=True)
# away from the branch cut (the negative real axis): imaginary parts are nonzero
_unary("angle", np.angle, doms=(dom(), _NZ), real_out=True)


def _compare(opname, npop):
    def op(g, a, b, c, d):
        return getattr(g, opname)(g.complex(a, b), g.complex(c, d))

    # integral values so that equal parts occur
    row(f"complex_{opname}", op, lambda a, b, c, d: npop(_z(a, b), _z(c, d)), F, [Case(s) for s in _PAIR_SHAPES],
        doms=dom(lo=-1, hi=1, integral=True), out_dtype="bool", covers=(opname,))


_compare("equal", np.equal)
_compare("not_equal", np.not_equal)


def _cast_to_real(g, a, b):
    return g.cast(g.complex(a, b), "float32")


row("complex_cast_to_real", _cast_to_real, lambda a, b: np.asarray(a, np.float32), F,
    [Case(((5,), (5,))), Case(((2, 0), (2, 0)))], out_dtype="float32", covers=("cast",))


def _cast_from_real(g, x):
    z = g.cast(x, "complex128" if x.dtype.name == "float64" else "complex64")
    return g.real_part(z), g.imaginary_part(z)


row("complex_cast_from_real", _cast_from_real, lambda x: (x, np.zeros_like(x)), F, [Case(((4, 3),)), Case(((0,),))],
    out_dtype=lambda d: (d, d), covers=("cast",), grad=Grad(cases=(0,)))


def _select_complex(g, p, a, b, c, d):
    z = g.select(g.greater_than(p, 0.0), g.complex(a, b), g.complex(c, d))
    return g.real_part(z), g.imaginary_part(z)


row("complex_select", _select_complex,
    lambda p, a, b, c, d: _parts(np.where(p > 0, _z(a, b), _z(c, d))), F,
    [Case(((3, 4), (3, 4), (3, 4), (3, 4), (3, 4))), Case(((4,), (3, 1), (3, 1), (1, 4), (1, 4)))],
    doms=(_NZ, dom(), dom(), dom(), dom()), out_dtype=lambda d: (d, d), covers=("select",),
    grad=Grad(wrt=(1, 2, 3, 4), cases=(0, 1)))
